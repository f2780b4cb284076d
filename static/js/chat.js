// The chat log.
//
// A conversation entry (PROTOCOL.md: history entries, and the live events
// that make them) is rendered as
//   <div class="entry" data-testid="entry" data-kind="<kind>" data-role="<role>" data-seq?>
//     <div class="msg" data-testid="chat-message" data-role="user|assistant|system|error">text</div>
//     <span class="entry-marker" data-testid="interrupted">[interrupted]</span>   (an interrupted reply only)
//   </div>
// the same way whether it came from session.resume / session.reopen /
// session.history or from the live events, so a reload shows what the live
// page showed. Kinds: prompt, reply, slash, slash_output, error, notice
// (unknown kinds render as notices). An error entry reads
// "error CODE: message".
//
// Lines that are not part of the conversation (local failures, "a reply is
// still being written", hints) are a bare chat-message div, outside any entry.
//
// An assistant message being streamed carries data-streaming="true" and
// data-turn-id until its message.complete arrives.
//
// Every text is set with textContent: it is user or model content.

const ROLES = new Set(['user', 'assistant', 'system', 'error']);

/** The message role (its look) of an entry kind. */
const KIND_ROLE = {
	prompt: 'user',
	slash: 'user',
	reply: 'assistant',
	slash_output: 'assistant',
	error: 'error',
	notice: 'system',
};

/** What an error entry shows: "error CODE: message". */
export function errorText(code, message) {
	return code ? `error ${code}: ${message ?? ''}` : `error: ${message ?? ''}`;
}

export class ChatLog {
	#el;
	#streams = new Map(); // turn_id -> entry element

	/** @param {HTMLElement} el the chat-log container */
	constructor(el) {
		this.#el = el;
	}

	clear() {
		this.#el.replaceChildren();
		this.#streams.clear();
	}

	/**
	 * Appends a line that is not a conversation entry and returns its element.
	 * @param {string} role user|assistant|system|error (anything else shows as system)
	 * @param {string} text
	 */
	add(role, text) {
		const stick = role === 'user' || this.#atBottom();
		const div = message(role, text);
		this.#el.append(div);
		if (stick) this.#scrollToEnd();
		return div;
	}

	/** Shows a local failure (not an entry): "error CODE: message", then data.stderr_tail when not empty. */
	addError(err, context) {
		let text = err.code != null ? `error ${err.code}: ${err.message}` : `error: ${err.message}`;
		if (context) text = `${context}: ${text}`;
		const tail = stderrTail(err);
		if (tail) text += '\n' + tail;
		return this.add('error', text);
	}

	/**
	 * Appends a conversation entry ({kind, role?, text, interrupted?, code?,
	 * turn_id?, seq?}: a history entry, or one made from a live event) and
	 * returns its element.
	 */
	entry(e) {
		const el = renderEntry(e);
		const stick = el.dataset.role === 'user' || this.#atBottom();
		this.#el.append(el);
		if (stick) this.#scrollToEnd();
		return el;
	}

	/** Puts entries (older history, oldest first) before everything shown. */
	prepend(entries) {
		const el = this.#el;
		const before = el.scrollHeight - el.scrollTop;
		el.prepend(...entries.map(renderEntry));
		el.scrollTop = el.scrollHeight - before;
	}

	/**
	 * Makes an entry a plain line: it was shown optimistically but the server
	 * did not keep it (e.g. the request failed before it ran).
	 */
	demote(el) {
		if (!el?.classList.contains('entry')) return;
		el.classList.remove('entry');
		delete el.dataset.testid;
		delete el.dataset.kind;
	}

	/**
	 * Puts the entries from el (included) to the end in the server's order:
	 * when they are the same entries as stored (kind and text, in any
	 * order), they are replaced by stored, in its order. Returns whether it
	 * did. (Two things happening at once, e.g. a slash command's reply and
	 * its worker's exit, may reach the page in another order than the
	 * history keeps them in.)
	 */
	reconcile(el, stored) {
		if (!el?.isConnected || el.dataset.testid !== 'entry') return false;
		const shown = [];
		for (let n = el; n; n = n.nextElementSibling) {
			if (n.dataset.testid === 'entry') shown.push(n);
			if (n.querySelector('[data-streaming="true"]')) return false;
		}
		const rendered = stored.map(renderEntry);
		const key = (n) => n.dataset.kind + '\u0000' + n.textContent;
		const a = shown.map(key).sort();
		const b = rendered.map(key).sort();
		if (a.length !== b.length || a.some((k, i) => k !== b[i])) return false;
		if (shown.every((n, i) => key(n) === key(rendered[i]))) return true;
		shown[0].before(...rendered);
		for (const n of shown) n.remove();
		return true;
	}

	/** Appends delta text to the streaming reply of a turn, creating it on first use. */
	delta(turnId, text) {
		const stick = this.#atBottom();
		let el = this.#streams.get(turnId);
		if (!el) {
			el = this.entry({ kind: 'reply', text: '', turn_id: turnId });
			el.querySelector('.msg').dataset.streaming = 'true';
			this.#streams.set(turnId, el);
		}
		el.querySelector('.msg').append(text ?? '');
		if (stick) this.#scrollToEnd();
	}

	/** Sets the final text of a turn's reply and ends its streaming state. */
	complete(turnId, text, interrupted) {
		const stick = this.#atBottom();
		let el = this.#streams.get(turnId);
		this.#streams.delete(turnId);
		if (!el) el = this.entry({ kind: 'reply', text: '', turn_id: turnId });
		const msg = el.querySelector('.msg');
		if (typeof text === 'string') msg.textContent = text;
		delete msg.dataset.streaming;
		if (interrupted) markInterrupted(el);
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

function message(role, text) {
	const div = document.createElement('div');
	div.className = 'msg';
	div.dataset.testid = 'chat-message';
	div.dataset.role = ROLES.has(role) ? role : 'system';
	div.textContent = text;
	return div;
}

function renderEntry(e) {
	const kind = typeof e.kind === 'string' && e.kind ? e.kind : kindOfRole(e.role);
	const role = KIND_ROLE[kind] ?? 'system';
	const wrap = document.createElement('div');
	wrap.className = 'entry';
	wrap.dataset.testid = 'entry';
	wrap.dataset.kind = kind;
	wrap.dataset.role = role;
	if (e.seq != null) wrap.dataset.seq = String(e.seq);
	if (e.turn_id) wrap.dataset.turnId = e.turn_id;
	const text = kind === 'error' ? errorText(e.code, e.text) : (e.text ?? '');
	const msg = message(role, text);
	if (e.turn_id && kind === 'reply') msg.dataset.turnId = e.turn_id;
	if (e.code) wrap.dataset.code = String(e.code);
	wrap.append(msg);
	if (kind === 'reply' && e.interrupted) markInterrupted(wrap);
	return wrap;
}

/** The kind of an entry of an older server that gave only a role. */
function kindOfRole(role) {
	switch (role) {
		case 'user':
			return 'prompt';
		case 'assistant':
			return 'reply';
		case 'error':
			return 'error';
		default:
			return 'notice';
	}
}

function markInterrupted(wrap) {
	const msg = wrap.querySelector('.msg');
	msg.dataset.interrupted = 'true';
	if (wrap.querySelector('.entry-marker')) return;
	const marker = document.createElement('span');
	marker.className = 'entry-marker';
	marker.dataset.testid = 'interrupted';
	marker.textContent = '[interrupted]';
	wrap.append(marker);
}

function stderrTail(err) {
	const tail = err?.data?.stderr_tail;
	if (Array.isArray(tail)) return tail.join('\n');
	return tail ? String(tail) : '';
}

export { stderrTail };
