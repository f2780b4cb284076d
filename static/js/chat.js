// The chat log: one div per message, data-role = user|assistant|system|error.
// An assistant message being streamed carries data-streaming="true" and
// data-turn-id until its message.complete arrives.

const ROLES = new Set(['user', 'assistant', 'system', 'error']);

export class ChatLog {
	#el;
	#streams = new Map(); // turn_id -> element

	/** @param {HTMLElement} el the chat-log container */
	constructor(el) {
		this.#el = el;
	}

	clear() {
		this.#el.replaceChildren();
		this.#streams.clear();
	}

	/**
	 * Appends a message and returns its element.
	 * @param {string} role user|assistant|system|error (anything else shows as system)
	 * @param {string} text
	 */
	add(role, text) {
		const stick = role === 'user' || this.#atBottom();
		const div = document.createElement('div');
		div.className = 'msg';
		div.dataset.testid = 'chat-message';
		div.dataset.role = ROLES.has(role) ? role : 'system';
		div.textContent = text;
		this.#el.append(div);
		if (stick) this.#scrollToEnd();
		return div;
	}

	/** Shows an error: "error CODE: message", then data.stderr_tail when present. */
	addError(err, context) {
		let text = err.code != null ? `error ${err.code}: ${err.message}` : `error: ${err.message}`;
		if (context) text = `${context}: ${text}`;
		const tail = err.data?.stderr_tail;
		if (tail) text += '\n' + (Array.isArray(tail) ? tail.join('\n') : String(tail));
		return this.add('error', text);
	}

	/** Appends delta text to the streaming message of a turn, creating it on first use. */
	delta(turnId, text) {
		const stick = this.#atBottom();
		let div = this.#streams.get(turnId);
		if (!div) {
			div = this.add('assistant', '');
			div.dataset.streaming = 'true';
			div.dataset.turnId = turnId;
			this.#streams.set(turnId, div);
		}
		div.append(text ?? '');
		if (stick) this.#scrollToEnd();
	}

	/** Sets the final text of a turn's message and ends its streaming state. */
	complete(turnId, text, interrupted) {
		const stick = this.#atBottom();
		let div = this.#streams.get(turnId);
		this.#streams.delete(turnId);
		if (!div) {
			div = this.add('assistant', '');
			div.dataset.turnId = turnId;
		}
		if (typeof text === 'string') div.textContent = text;
		delete div.dataset.streaming;
		if (interrupted) div.dataset.interrupted = 'true';
		if (stick) this.#scrollToEnd();
	}

	#atBottom() {
		const el = this.#el;
		return el.scrollHeight - el.scrollTop - el.clientHeight < 40;
	}

	#scrollToEnd() {
		this.#el.scrollTop = this.#el.scrollHeight;
	}
}
