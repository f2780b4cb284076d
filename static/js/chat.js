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
// (unknown kinds render as notices). An error entry reads as one sentence
// (data-testid="error-sentence", no code, no worker internals) followed by a
// closed <details data-testid="error-details"> with "error CODE: message"
// and, live, the worker's stderr tail.
//
// Lines that are not part of the conversation (local failures, "a reply is
// still being written", hints) are a bare chat-message div, outside any entry.
//
// An assistant message being streamed carries data-streaming="true" and
// data-turn-id until its message.complete arrives. A reply entry with
// status "streaming" (session.resume while a turn runs) is such a message:
// the turn's next deltas continue its text.
//
// Another tab's prompts and slash commands (and their outputs) arrive as
// event history.entry {entry} (never for this tab's own: it shows them
// from its calls): live() shows them, unless an entry of that seq is.
//
// A turn that failed before any text shows its error (or notice) alone:
// its message.complete (empty, interrupted, status "error") adds no reply,
// and an empty reply entry with status "error" is not shown.
//
// A reply (kind reply) is Markdown: its message holds the sanitized HTML of
// markdown.js (class "md"), re-rendered from the accumulated text while it
// streams (at most every RENDER_EVERY_MS). Every other text is set with
// textContent: it is user or model content.
//
// An agent's turn adds cards (entries too):
//   approval_request  <div data-testid="approval-card" data-request-id data-state="pending|approved|denied|resolved">
//                     the tool, the command (monospace) and Approve / Deny
//                     buttons (data-testid approve / deny) while pending;
//                     with an ACP agent's options (data.options) one button
//                     per option kind present instead, each with its choice
//                     (data-choice): allow_once "Allow once" (approve, once),
//                     allow_always "Always allow" (approve-always, always),
//                     reject_once "Reject" (deny, deny), reject_always
//                     "Always reject" (deny-always, deny_always), labelled
//                     with the option's name when it has one;
//                     once resolved a status line (data-testid="approval-status"):
//                     "approved", "denied", "denied: timed out", "approved in
//                     another tab", ...
//   tool_call         <div data-testid="tool-card" data-tool-id data-state="running|done">
//                     the tool's name, its command, and once complete its
//                     exit code, duration and output in a
//                     <details data-testid="tool-output">. An ACP agent's
//                     tool call (tool.start / tool.update) adds its kind
//                     (data-testid="tool-kind"), its status badge
//                     (data-testid="tool-badge", data-status pending |
//                     in_progress | completed | failed), its locations
//                     (<ul data-testid="tool-locations">) and its content
//                     (<div data-testid="tool-content">: text in a
//                     <pre data-testid="tool-text">, a diff as a unified
//                     line diff <div data-testid="tool-diff"> whose lines
//                     (data-op " ", "-", "+") start with their sign, a
//                     terminal as "terminal <id>" (data-testid="tool-terminal")).
//                     Its command is shown only when it is not its title.
// approval_resolved and tool_result entries update their card (found by
// request_id / tool_id) instead of adding one; without their card they show
// as a card of their own.
//
// An ACP agent's thinking (message.thought, not kept in the history) is a
// <div class="thought" data-testid="thought" data-turn-id> holding a closed
// <details> "Thinking" whose text grows as it streams; it is not an entry,
// and it stands above the reply of its turn.
//
// Every entry ends with a meta line, <div class="entry-meta">: its time,
// <time data-testid="entry-time" datetime="<ISO>" title="<the exact time>"
// data-short="14:05">, from the entry's at (a live entry without one: when
// it arrived here; a streamed reply: its first delta). A finished reply's
// meta line also holds a copy button (data-testid="copy-reply": copies its
// Markdown source; dataset.state copied|failed, as the code blocks' copy
// buttons) and a regenerate button (data-testid="regenerate"), shown on
// the last reply of the log only, while nothing runs (setIdle), and only
// when the prompt it answered is shown: a click calls opts.onRegenerate
// with that prompt's text (and its files' ids). The time's and the buttons' words are drawn by
// CSS (app.css), so that an entry's textContent stays its text (a prompt's
// files, when it has any, add their names and sizes after it: a
// <div data-testid="attachments"> of links, see attachments.js).

import { copyText, flash, renderMarkdown } from './markdown.js';
import { renderAttachments } from './attachments.js';

// A prompt's files (entry "attachments", issue 42) render under its text
// (attachments.js renderAttachments), each linking to attachmentHref(id).
let attachmentHref = null;

/** Sets how a shown entry's file links: fn(aid) -> its URL (null: names only). */
export function setAttachmentHref(fn) {
	attachmentHref = fn;
}

const RENDER_EVERY_MS = 50;

const ROLES = new Set(['user', 'assistant', 'system', 'error']);

/** The message role (its look) of an entry kind. */
const KIND_ROLE = {
	prompt: 'user',
	slash: 'user',
	reply: 'assistant',
	slash_output: 'assistant',
	error: 'error',
	notice: 'system',
	approval_request: 'system',
	approval_resolved: 'system',
	tool_call: 'tool',
	tool_result: 'tool',
};

/** Whether an approval choice (approval.respond's, approval.resolved's) lets the tool run. */
export function approves(choice) {
	return choice === 'once' || choice === 'always';
}

/** What a resolved approval card says. mine: this tab made the choice. */
export function approvalStatus(choice, by, mine) {
	let word = approves(choice) ? 'approved' : 'denied';
	if (choice === 'always') word = 'always allowed';
	else if (choice === 'deny_always') word = 'always rejected';
	switch (by) {
		case 'viewer':
		case undefined:
		case '':
			return mine === false ? `${word} in another tab` : word;
		case 'timeout':
			return `${word}: timed out`;
		case 'interrupt':
			return `${word}: interrupted`;
		case 'detach':
			return `${word}: no one was viewing`;
		case 'close':
			return `${word}: session closed`;
		default:
			return `${word}: ${by}`;
	}
}

/** The exact error as the server said it: "error CODE: message". */
export function errorText(code, message) {
	return code ? `error ${code}: ${message ?? ''}` : `error: ${message ?? ''}`;
}

// The words of a worker failure (error 5004's message starts with
// "worker <failure>: ", workers.Error): what a person is told. A worker's
// own refusal ("worker reply: ...") is its own sentence.
const FAILURE_SENTENCES = {
	spawn: 'The worker could not start.',
	crashed: 'The worker stopped before it answered.',
	timeout: 'The worker did not answer in time and was restarted.',
	protocol: 'The worker sent a reply dashgate could not read.',
};

/**
 * One clear sentence for an error: no code, no internals (those go behind
 * the disclosure, see errorMessage).
 */
export function errorSentence(code, message) {
	const m = String(message ?? '').trim();
	const w = /^worker (spawn|crashed|timeout|protocol|reply): ([\s\S]*)$/.exec(m);
	let s = m;
	if (w) s = w[1] === 'reply' ? w[2].trim() : FAILURE_SENTENCES[w[1]];
	else if (code === 4001) s = 'This session is closed or no longer exists.';
	else if (code === 4009) s = 'A reply is still being written; stop it or wait.';
	else if (code === -32603) s = m === 'request cancelled' ? 'The request was cancelled.' : 'Something went wrong inside dashgate.';
	if (!s) s = 'Something went wrong.';
	s = s.charAt(0).toUpperCase() + s.slice(1);
	return /[.!?]$/.test(s) ? s : s + '.';
}

/**
 * An error message element: the sentence, then a closed
 * <details data-testid="error-details"> holding the code, the exact
 * message and the worker's stderr tail (lines), if any.
 */
function errorMessage(code, text, tail) {
	const div = message('error', '');
	const sentence = el('span', 'error-sentence', errorSentence(code, text));
	sentence.dataset.testid = 'error-sentence';
	const details = el('details', 'error-details');
	details.dataset.testid = 'error-details';
	details.append(el('summary', '', 'details'));
	const lines = [errorText(code, text)];
	if (tail) lines.push('', 'worker stderr:', tail);
	details.append(el('pre', 'error-details-text', lines.join('\n')));
	div.append(sentence, details);
	return div;
}

export class ChatLog {
	#el;
	#streams = new Map(); // turn_id -> entry element
	#mine = new Map(); // request_id -> the choice this tab sent (approval.respond)
	#idle = false; // nothing runs in the session shown: the last reply may be regenerated
	#onRegenerate;

	/**
	 * @param {HTMLElement} el the chat-log container
	 * @param {{onRegenerate?: (prompt: string, files?: string[]) => void}} [opts]
	 */
	constructor(el, opts = {}) {
		this.#el = el;
		this.#onRegenerate = opts.onRegenerate;
		el.addEventListener('click', (ev) => this.#clicked(ev));
	}

	clear() {
		this.#el.replaceChildren();
		for (const el of this.#streams.values()) clearTimeout(el._renderTimer);
		this.#streams.clear();
	}

	/** Says whether nothing runs in the session shown (no turn, no command): regenerate shows only then. */
	setIdle(idle) {
		this.#idle = Boolean(idle);
		this.#updateRegenerate();
	}

	#clicked(ev) {
		const b = ev.target instanceof Element ? ev.target.closest('[data-testid="copy-reply"], [data-testid="regenerate"]') : null;
		const wrap = b?.closest('.entry');
		if (!wrap || b.hidden) return;
		if (b.dataset.testid === 'copy-reply') {
			copyText(wrap._text ?? '').then(
				(ok) => flash(b, ok ? 'copied' : 'failed'),
				() => flash(b, 'failed'),
			);
			return;
		}
		const prompt = promptBefore(wrap);
		if (!this.#idle || !prompt) return;
		this.#idle = false; // one click, one turn
		this.#updateRegenerate();
		this.#onRegenerate?.(prompt._text, prompt._files);
	}

	/**
	 * Shows the regenerate button of the last reply when it is finished,
	 * nothing runs and its prompt is shown; hides every other one.
	 */
	#updateRegenerate() {
		const replies = this.#el.querySelectorAll(':scope > .entry[data-kind="reply"]');
		const last = replies[replies.length - 1];
		for (const b of this.#el.querySelectorAll('[data-testid="regenerate"]:not([hidden])')) {
			if (b.closest('.entry') !== last) b.hidden = true;
		}
		const b = last?.querySelector('[data-testid="regenerate"]');
		if (!b) return;
		const prompt = promptBefore(last);
		const show = this.#idle && !!prompt && last.querySelector('.msg')?.dataset.streaming !== 'true';
		b.hidden = !show;
		if (show) {
			const label = `Regenerate: send the prompt "${clip(prompt._text)}" again as a new turn`;
			b.title = label;
			b.setAttribute('aria-label', label);
		}
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
		const stick = this.#atBottom();
		const div = errorMessage(err.code, err.message, stderrTail(err));
		if (context) div.querySelector('.error-sentence').prepend(`${context}: `);
		this.#el.append(div);
		if (stick) this.#scrollToEnd();
		return div;
	}

	/**
	 * Appends a conversation entry ({kind, role?, text, interrupted?, code?,
	 * turn_id?, seq?}: a history entry, or one made from a live event) and
	 * returns its element.
	 */
	entry(e, other = false) {
		if (failedEmpty(e)) return null;
		const merged = mergeEntry(this.#el, e, this.#mine);
		if (merged) return merged;
		const el = renderEntry(e);
		// The reader's own prompt brings the end into view; another tab's
		// (other: a history.entry) does not move a reader who scrolled up.
		const stick = (el.dataset.role === 'user' && !other) || this.#atBottom();
		if (e.kind === 'reply' && e.status === 'streaming' && e.turn_id) {
			// Being written (session.resume mid-turn): its deltas go on here.
			const old = this.#streams.get(e.turn_id);
			if (old) {
				clearTimeout(old._renderTimer);
				old.remove();
			}
			this.#streams.set(e.turn_id, el);
		}
		this.#el.append(el);
		if (stick) this.#scrollToEnd();
		this.#updateRegenerate();
		return el;
	}

	/**
	 * Takes a history.entry event's payload ({entry}: another tab's prompt,
	 * slash command or its result) and returns the element shown, or null
	 * when an entry of its seq is shown already.
	 */
	live(p) {
		const e = p?.entry;
		if (!e) return null;
		if (e.seq != null && this.#el.querySelector(`[data-testid="entry"][data-seq="${CSS.escape(String(e.seq))}"]`)) return null;
		return this.entry(e, true);
	}

	/** Puts entries (older history, oldest first) before everything shown. */
	prepend(entries) {
		const el = this.#el;
		const before = el.scrollHeight - el.scrollTop;
		const frag = document.createElement('div');
		for (const e of entries) {
			if (!failedEmpty(e) && !mergeEntry(frag, e, this.#mine)) frag.append(renderEntry(e));
		}
		el.prepend(...frag.children);
		el.scrollTop = el.scrollHeight - before;
		this.#updateRegenerate();
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
		// An error is known by its code and sentence: the stderr tail in its
		// details is live only.
		const key = (n) => n.dataset.kind + '\u0000' + (n.dataset.code ?? '') + '\u0000' + (n.querySelector('.error-sentence')?.textContent ?? n.textContent);
		const a = shown.map(key).sort();
		const b = rendered.map(key).sort();
		if (a.length !== b.length || a.some((k, i) => k !== b[i])) return false;
		if (shown.every((n, i) => key(n) === key(rendered[i]))) return true;
		shown[0].before(...rendered);
		for (const n of shown) n.remove();
		this.#updateRegenerate();
		return true;
	}

	/** Appends delta text to the streaming reply of a turn, creating it on first use. */
	delta(turnId, text) {
		const stick = this.#atBottom();
		let el = this.#streams.get(turnId);
		if (!el) {
			el = this.#startReply(turnId);
			el.querySelector('.msg').dataset.streaming = 'true';
			setFinished(el, false);
			this.#streams.set(turnId, el);
			this.#updateRegenerate();
		}
		el._text = (el._text ?? '') + (text ?? '');
		// Re-rendered at most every RENDER_EVERY_MS: at once after a
		// pause, else once the interval since the last render is over.
		if (!el._renderTimer) {
			const wait = Math.max(0, (el._renderedAt ?? 0) + RENDER_EVERY_MS - performance.now());
			if (wait === 0) this.#renderStream(el);
			else el._renderTimer = setTimeout(() => this.#renderStream(el), wait);
		}
		if (stick) this.#scrollToEnd();
	}

	#renderStream(el) {
		el._renderTimer = 0;
		el._renderedAt = performance.now();
		const stick = this.#atBottom();
		renderMarkdown(el.querySelector('.msg'), el._text ?? '');
		if (stick) this.#scrollToEnd();
	}

	/**
	 * Starts the reply entry of a turn where its text starts, as the
	 * history keeps it: right after its prompt, or after the cards
	 * (approvals, tool runs) that came before any of its text.
	 */
	#startReply(turnId) {
		return this.entry({ kind: 'reply', text: '', turn_id: turnId });
	}

	/**
	 * Sets the final text of a turn's reply and ends its streaming state.
	 * status: message.complete's status ("incomplete" adds a marker).
	 */
	complete(turnId, text, interrupted, status) {
		const stick = this.#atBottom();
		let el = this.#streams.get(turnId);
		this.#streams.delete(turnId);
		const final0 = typeof text === 'string' ? text : '';
		// A turn that failed before any text: its error entry (next) says it all.
		if (!el && final0 === '' && status === 'error') return;
		if (!el) el = this.#startReply(turnId);
		clearTimeout(el._renderTimer);
		el._renderTimer = 0;
		const msg = el.querySelector('.msg');
		const final = typeof text === 'string' ? text : (el._text ?? '');
		el._text = final;
		renderMarkdown(msg, final);
		delete msg.dataset.streaming;
		setFinished(el, true);
		if (interrupted) markInterrupted(el);
		if (status === 'incomplete') markIncomplete(el);
		if (stick) this.#scrollToEnd();
		this.#updateRegenerate();
	}

	/** Notes the choice this tab sends for an approval (before it is sent). */
	responding(requestId, choice) {
		this.#mine.set(requestId, choice);
	}

	/**
	 * Takes approval.respond's answer: when another tab or an event resolved
	 * the approval first (resolved false), the card says so.
	 */
	responded(requestId, resolved) {
		const card = findCard(this.#el, 'approval-card', 'requestId', requestId);
		if (resolved) return;
		this.#mine.delete(requestId);
		if (!card) return;
		if (card.dataset.state === 'pending') {
			setApprovalState(card, 'resolved', 'already answered elsewhere');
		} else if (card.dataset.by === 'viewer' && card.dataset.mine === 'true') {
			// The event came first and looked like ours: it was not.
			card.dataset.mine = 'false';
			setApprovalState(card, card.dataset.state, approvalStatus(card.dataset.choice, 'viewer', false));
		}
	}

	/** Sets the buttons of a pending approval card (disabled while a choice is sent). */
	busy(requestId, on) {
		const card = findCard(this.#el, 'approval-card', 'requestId', requestId);
		for (const b of card?.querySelectorAll('.card-actions button') ?? []) b.disabled = on;
	}

	/**
	 * Marks the pending approval cards whose request is not in pending
	 * (session.resume's pending_approvals) as no longer pending, and adds a
	 * card for each pending one not shown (older than the history shown).
	 */
	syncApprovals(pending) {
		const ids = new Set(pending.map((a) => a.request_id));
		for (const card of this.#el.querySelectorAll('[data-testid="approval-card"][data-state="pending"]')) {
			if (!ids.has(card.dataset.requestId)) setApprovalState(card, 'resolved', 'no longer pending');
		}
		for (const a of pending) {
			const card = findCard(this.#el, 'approval-card', 'requestId', a.request_id);
			if (!card) {
				this.entry({ kind: 'approval_request', text: a.command, turn_id: a.turn_id, data: { request_id: a.request_id, tool: a.tool, options: a.options } });
			} else if (card.dataset.state === 'pending' && Array.isArray(a.options) && a.options.length) {
				// The history keeps no options: the card of a history entry gets them here.
				card.querySelector('.card-actions')?.replaceWith(approvalActions(a.options));
			}
		}
	}

	/**
	 * Appends thinking text of a turn (message.thought) to its Thinking
	 * block, made on first use above the turn's reply.
	 */
	thought(turnId, text) {
		const stick = this.#atBottom();
		let block = [...this.#el.querySelectorAll(':scope > [data-testid="thought"]')].find((b) => b.dataset.turnId === String(turnId ?? ''));
		if (!block) {
			block = el('div', 'thought');
			block.dataset.testid = 'thought';
			block.dataset.turnId = String(turnId ?? '');
			const details = el('details', 'thought-details');
			details.append(el('summary', '', 'Thinking'), el('div', 'thought-text'));
			block.append(details);
			const reply = this.#streams.get(turnId);
			if (reply?.isConnected) reply.before(block);
			else this.#el.append(block);
		}
		const t = block.querySelector('.thought-text');
		t.textContent += text ?? '';
		if (stick) this.#scrollToEnd();
	}

	/** Applies a tool.update to its tool card; returns whether the card is shown. */
	toolUpdate(p) {
		const card = findCard(this.#el, 'tool-card', 'toolId', p?.tool_id);
		if (!card) return false;
		const stick = this.#atBottom();
		applyTool(card, p);
		if (stick) this.#scrollToEnd();
		return true;
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

/** Whether e is the empty reply of a turn that failed before any text (its error or notice tells). */
function failedEmpty(e) {
	return e?.kind === 'reply' && !e.text && e.status === 'error';
}

function renderEntry(e) {
	const wrap = renderBody(e);
	const meta = el('div', 'entry-meta');
	meta.append(entryTime(e.at));
	if (wrap.dataset.kind === 'reply') {
		const copy = actionButton('copy-reply', 'entry-copy', 'Copy the reply (its Markdown)');
		const again = actionButton('regenerate', 'entry-regenerate', 'Regenerate: send its prompt again as a new turn');
		again.hidden = true;
		meta.append(copy, again);
	}
	wrap.append(meta);
	if (wrap.dataset.kind === 'reply') setFinished(wrap, e.status !== 'streaming');
	const prompt = wrap.dataset.kind === 'prompt';
	if (prompt) wrap._text = e.text ?? '';
	return wrap;
}

function actionButton(testid, className, label) {
	const b = el('button', 'entry-action ' + className);
	b.type = 'button';
	b.dataset.testid = testid;
	b.title = label;
	b.setAttribute('aria-label', label);
	return b;
}

/** Shows a reply's copy button once its text is final. */
function setFinished(wrap, done) {
	const copy = wrap.querySelector('[data-testid="copy-reply"]');
	if (copy) copy.hidden = !done;
}

/** The prompt entry a reply answers: the nearest prompt before it, if shown. */
function promptBefore(wrap) {
	for (let n = wrap.previousElementSibling; n; n = n.previousElementSibling) {
		if (n.classList.contains('entry') && n.dataset.kind === 'prompt') return n;
	}
	return null;
}

function clip(text, n = 60) {
	const s = String(text ?? '').replace(/\s+/g, ' ').trim();
	return s.length > n ? s.slice(0, n - 1) + '…' : s;
}

const pad = (n) => String(n).padStart(2, '0');

/**
 * The time of an entry: at (RFC 3339) when it has one, else now (it just
 * arrived). Short (14:05; with the day when not today) in its words, the
 * exact time in its title and datetime.
 */
function entryTime(at) {
	let d = at ? new Date(at) : new Date();
	if (Number.isNaN(d.getTime())) d = new Date();
	const t = document.createElement('time');
	t.className = 'entry-time';
	t.dataset.testid = 'entry-time';
	t.dateTime = d.toISOString();
	let short = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
	const now = new Date();
	if (d.toDateString() !== now.toDateString()) {
		const day = d.toLocaleDateString(undefined, { day: 'numeric', month: 'short', year: d.getFullYear() === now.getFullYear() ? undefined : 'numeric' });
		short = `${day} ${short}`;
	}
	t.dataset.short = short;
	t.title = d.toLocaleString(undefined, { dateStyle: 'full', timeStyle: 'long', hourCycle: 'h23' });
	return t;
}

function renderBody(e) {
	const kind = typeof e.kind === 'string' && e.kind ? e.kind : kindOfRole(e.role);
	const role = KIND_ROLE[kind] ?? 'system';
	const wrap = document.createElement('div');
	wrap.className = 'entry';
	wrap.dataset.testid = 'entry';
	wrap.dataset.kind = kind;
	wrap.dataset.role = role;
	if (e.seq != null) wrap.dataset.seq = String(e.seq);
	if (e.turn_id) wrap.dataset.turnId = e.turn_id;
	if (e.code) wrap.dataset.code = String(e.code);
	const data = e.data && typeof e.data === 'object' ? e.data : {};
	switch (kind) {
		case 'approval_request':
			wrap.append(approvalCard(data.request_id, data.tool, e.text, data.options));
			return wrap;
		case 'approval_resolved': {
			// Its request is not shown (older than the history shown).
			const card = approvalCard(data.request_id, '', '');
			resolveCard(card, data.choice ?? e.text, data.by, undefined);
			wrap.append(card);
			return wrap;
		}
		case 'tool_call':
			wrap.append(toolCard(data.tool_id, data.name, e.text, data));
			return wrap;
		case 'tool_result': {
			const card = toolCard(data.tool_id, '', '');
			completeToolCard(card, { ...data, output: e.text });
			wrap.append(card);
			return wrap;
		}
	}
	const text = e.text ?? '';
	const msg = kind === 'error' ? errorMessage(e.code, text, e.stderr_tail) : message(role, text);
	if (kind === 'reply') {
		msg.classList.add('md');
		wrap._text = text;
		renderMarkdown(msg, text);
		if (e.turn_id) msg.dataset.turnId = e.turn_id;
		if (e.status === 'streaming') msg.dataset.streaming = 'true';
	}
	wrap.append(msg);
	if (kind === 'prompt' && Array.isArray(e.attachments) && e.attachments.length > 0) {
		wrap.append(renderAttachments(e.attachments, attachmentHref));
		wrap._files = e.attachments; // a regenerate sends them again
	}
	if ((kind === 'reply' || kind === 'error') && e.interrupted) markInterrupted(wrap);
	if (kind === 'reply' && e.status === 'incomplete') markIncomplete(wrap);
	return wrap;
}

/**
 * Applies an approval_resolved / tool_result entry to its card under root,
 * and returns the card's entry; null when its card is not there.
 */
function mergeEntry(root, e, mine) {
	const data = e.data && typeof e.data === 'object' ? e.data : {};
	if (e.kind === 'approval_resolved') {
		const card = findCard(root, 'approval-card', 'requestId', data.request_id);
		if (!card) return null;
		const choice = data.choice ?? e.text;
		let isMine;
		if (e.live && (data.by ?? 'viewer') === 'viewer') isMine = mine.get(data.request_id) === choice;
		resolveCard(card, choice, data.by, isMine);
		mine.delete(data.request_id);
		return card.closest('.entry');
	}
	if (e.kind === 'tool_result') {
		const card = findCard(root, 'tool-card', 'toolId', data.tool_id);
		if (!card || card.dataset.state !== 'running') return null;
		completeToolCard(card, { ...data, output: e.text });
		return card.closest('.entry');
	}
	return null;
}

function findCard(root, testid, key, id) {
	if (id == null || id === '') return null;
	for (const c of root.querySelectorAll(`[data-testid="${testid}"]`)) {
		if (c.dataset[key] === String(id)) return c;
	}
	return null;
}

function el(tag, className, text) {
	const n = document.createElement(tag);
	if (className) n.className = className;
	if (text != null) n.textContent = text;
	return n;
}

function approvalCard(requestId, tool, command, options) {
	const card = el('div', 'card approval-card');
	card.dataset.testid = 'approval-card';
	card.dataset.requestId = requestId ?? '';
	card.dataset.state = 'pending';
	const head = el('div', 'card-head');
	head.append(el('span', 'card-label', 'approval'), el('span', 'card-tool', tool || 'tool'));
	card.append(head);
	if (command) {
		const cmd = el('pre', 'card-command', command);
		cmd.dataset.testid = 'approval-command';
		card.append(cmd);
	}
	card.append(approvalActions(options));
	return card;
}

// The buttons of an ACP agent's option kinds, in this order: the kind,
// the choice approval.respond sends, the button's testid, its words
// without the option's name, its look.
const OPTION_BUTTONS = [
	['allow_once', 'once', 'approve', 'Allow once', 'btn btn-primary'],
	['allow_always', 'always', 'approve-always', 'Always allow', 'btn'],
	['reject_once', 'deny', 'deny', 'Reject', 'btn btn-danger'],
	['reject_always', 'deny_always', 'deny-always', 'Always reject', 'btn btn-danger'],
];

/**
 * The buttons of a pending approval: one per option kind present among
 * options (an ACP agent's), else Approve and Deny. Each carries its
 * choice in data-choice.
 */
function approvalActions(options) {
	const actions = el('div', 'card-actions');
	const button = (choice, testid, label, className) => {
		const b = el('button', className, label);
		b.type = 'button';
		b.dataset.testid = testid;
		b.dataset.choice = choice;
		return b;
	};
	const opts = Array.isArray(options) ? options.filter((o) => o && typeof o === 'object') : [];
	if (opts.length === 0) {
		actions.append(button('once', 'approve', 'Approve', 'btn btn-primary'), button('deny', 'deny', 'Deny', 'btn btn-danger'));
		return actions;
	}
	for (const [kind, choice, testid, words, className] of OPTION_BUTTONS) {
		const o = opts.find((x) => x.kind === kind);
		if (!o) continue;
		const b = button(choice, testid, typeof o.name === 'string' && o.name.trim() ? o.name : words, className);
		b.title = words;
		actions.append(b);
	}
	return actions;
}

/** mine: true (this tab chose), false (another did), undefined (unknown: history). */
function resolveCard(card, choice, by, mine) {
	card.dataset.choice = choice ?? '';
	card.dataset.by = by ?? '';
	if (mine !== undefined) card.dataset.mine = String(mine);
	setApprovalState(card, approves(choice) ? 'approved' : 'denied', approvalStatus(choice, by, mine));
}

function setApprovalState(card, state, text) {
	card.dataset.state = state;
	card.querySelector('.card-actions')?.remove();
	let status = card.querySelector('.card-status');
	if (!status) {
		status = el('div', 'card-status');
		status.dataset.testid = 'approval-status';
		card.append(status);
	}
	status.textContent = text;
}

/** acp: an ACP agent's fields of its tool.start ({kind, status, locations, content}), if any. */
function toolCard(toolId, name, command, acp = {}) {
	const card = el('div', 'card tool-card');
	card.dataset.testid = 'tool-card';
	card.dataset.toolId = toolId ?? '';
	card.dataset.state = 'running';
	const head = el('div', 'card-head');
	// An ACP agent's card has its status badge instead.
	const status = el('span', 'card-status tool-status', isACPTool(acp) ? '' : 'running…');
	status.dataset.testid = 'tool-status';
	head.append(el('span', 'card-label', 'tool'), el('span', 'card-tool', name || 'tool'), status);
	card.append(head);
	if (command && !(command === name && isACPTool(acp))) {
		const cmd = el('pre', 'card-command', command);
		cmd.dataset.testid = 'tool-command';
		card.append(cmd);
	}
	applyTool(card, acp);
	return card;
}

/** Whether a tool.start carries an ACP agent's fields. */
function isACPTool(p) {
	return !!p && (typeof p.kind === 'string' || typeof p.status === 'string' || Array.isArray(p.locations) || Array.isArray(p.content));
}

/**
 * Sets what an ACP agent said of a tool call (tool.start's or a
 * tool.update's fields: title, kind, status, locations, content); a field
 * it leaves out stays as it was. Every text is set with textContent.
 */
function applyTool(card, p) {
	if (!p || typeof p !== 'object') return;
	const head = card.querySelector('.card-head');
	if (typeof p.title === 'string' && p.title) head.querySelector('.card-tool').textContent = p.title;
	if (typeof p.kind === 'string' && p.kind) {
		let kind = head.querySelector('[data-testid="tool-kind"]');
		if (!kind) {
			kind = el('span', 'tool-kind');
			kind.dataset.testid = 'tool-kind';
			head.querySelector('.card-tool').after(kind);
		}
		kind.textContent = p.kind;
	}
	if (typeof p.status === 'string' && p.status) {
		let badge = head.querySelector('[data-testid="tool-badge"]');
		if (!badge) {
			badge = el('span', 'tool-badge');
			badge.dataset.testid = 'tool-badge';
			head.querySelector('.tool-status').before(badge);
		}
		badge.dataset.status = p.status;
		badge.textContent = p.status.replace(/_/g, ' ');
	}
	if (Array.isArray(p.locations)) {
		card.querySelector(':scope > [data-testid="tool-locations"]')?.remove();
		const paths = p.locations.filter((l) => l && typeof l.path === 'string' && l.path);
		if (paths.length) {
			const ul = el('ul', 'tool-locations');
			ul.dataset.testid = 'tool-locations';
			for (const l of paths) {
				const li = el('li', 'tool-location', Number.isInteger(l.line) ? `${l.path}:${l.line}` : l.path);
				li.dataset.path = l.path;
				ul.append(li);
			}
			toolSlot(card, 'tool-locations').before(ul);
		}
	}
	if (Array.isArray(p.content)) {
		card.querySelector(':scope > [data-testid="tool-content"]')?.remove();
		const box = toolContent(p.content);
		card._contentText = p.content.filter((c) => c?.type === 'text').map((c) => String(c.text ?? '')).join('\n');
		if (box) toolSlot(card, 'tool-content').before(box);
	}
}

// The parts of a tool card in their order after its head: what a new part
// goes before.
const TOOL_PARTS = ['tool-command', 'tool-locations', 'tool-content', 'tool-output'];

/** The node a new part (testid) of card goes before: the next part shown, else a marker at the end. */
function toolSlot(card, testid) {
	for (const later of TOOL_PARTS.slice(TOOL_PARTS.indexOf(testid) + 1)) {
		const n = card.querySelector(`:scope > [data-testid="${later}"]`);
		if (n) return n;
	}
	let end = card.querySelector(':scope > .tool-end');
	if (!end) {
		end = el('span', 'tool-end');
		end.hidden = true;
		card.append(end);
	}
	return end;
}

/** The content items of an ACP tool call (text, diff, terminal), or null when none shows. */
function toolContent(items) {
	const box = el('div', 'tool-content');
	box.dataset.testid = 'tool-content';
	for (const c of items) {
		if (!c || typeof c !== 'object') continue;
		switch (c.type) {
			case 'text': {
				const pre = el('pre', 'tool-text', String(c.text ?? ''));
				pre.dataset.testid = 'tool-text';
				box.append(pre);
				break;
			}
			case 'diff':
				box.append(diffView(c.path, c.old_text, c.new_text));
				break;
			case 'terminal': {
				const t = el('div', 'tool-terminal', `terminal ${c.terminal_id ?? ''}`);
				t.dataset.testid = 'tool-terminal';
				box.append(t);
				break;
			}
		}
	}
	return box.childElementCount ? box : null;
}

/** A diff item: its path, then its lines as a unified line diff (old_text null: a new file). */
function diffView(path, oldText, newText) {
	const box = el('div', 'tool-diff');
	box.dataset.testid = 'tool-diff';
	const head = el('div', 'tool-diff-path', String(path ?? ''));
	head.dataset.testid = 'tool-diff-path';
	const pre = el('pre', 'tool-diff-lines');
	for (const [op, line] of lineDiff(oldText == null ? null : String(oldText), String(newText ?? ''))) {
		const row = el('span', 'diff-line', `${op}${line}\n`);
		row.dataset.op = op;
		pre.append(row);
	}
	box.append(head, pre);
	return box;
}

// Above this many cells (old lines times new lines) the changed middle is
// shown as removed then added, not matched line by line.
const DIFF_CELLS_MAX = 250000;

/**
 * The line diff of a and b: [op, line] pairs, op " " (in both), "-" (in a
 * only) or "+" (in b only), in order. a null: every line of b is added.
 * The common head and tail are matched first, the middle by a longest
 * common subsequence of lines.
 */
export function lineDiff(a, b) {
	const split = (t) => (t === '' ? [] : t.replace(/\n$/, '').split('\n'));
	const x = a == null ? [] : split(a);
	const y = split(b);
	let head = 0;
	while (head < x.length && head < y.length && x[head] === y[head]) head++;
	let tail = 0;
	while (tail < x.length - head && tail < y.length - head && x[x.length - 1 - tail] === y[y.length - 1 - tail]) tail++;
	const xm = x.slice(head, x.length - tail);
	const ym = y.slice(head, y.length - tail);
	const out = x.slice(0, head).map((l) => [' ', l]);
	const n = xm.length;
	const m = ym.length;
	if (n * m > DIFF_CELLS_MAX) {
		for (const l of xm) out.push(['-', l]);
		for (const l of ym) out.push(['+', l]);
	} else {
		// lcs[i][j]: the longest common subsequence of xm[i:] and ym[j:].
		const lcs = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
		for (let i = n - 1; i >= 0; i--) {
			for (let j = m - 1; j >= 0; j--) {
				lcs[i][j] = xm[i] === ym[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
			}
		}
		let i = 0;
		let j = 0;
		while (i < n || j < m) {
			if (i < n && j < m && xm[i] === ym[j]) {
				out.push([' ', xm[i++]]);
				j++;
			} else if (i < n && (j === m || lcs[i + 1][j] >= lcs[i][j + 1])) {
				out.push(['-', xm[i++]]);
			} else {
				out.push(['+', ym[j++]]);
			}
		}
	}
	for (const l of x.slice(x.length - tail)) out.push([' ', l]);
	return out;
}

function completeToolCard(card, r) {
	card.dataset.state = 'done';
	const code = Number(r.exit_code ?? 0);
	card.dataset.exitCode = String(code);
	// An ACP agent's tool (a read, an edit) ran no process: its final
	// status (completed, failed) goes to its badge, not an exit code, live
	// and from the history alike.
	const acp = typeof r.status === 'string' && r.status !== '';
	if (acp) applyTool(card, { status: r.status });
	const parts = acp ? [] : [`exit ${code}`];
	if (r.duration_ms != null) parts.push(formatDuration(Number(r.duration_ms)));
	if (r.truncated) parts.push('(truncated)');
	const status = card.querySelector('.tool-status');
	status.textContent = parts.join(' · ');
	status.classList.toggle('failed', acp ? r.status === 'failed' : code !== 0);
	const output = String(r.output ?? '');
	card.querySelector('.tool-output')?.remove();
	// An ACP tool call's output is its text content, shown already.
	if (card._contentText != null && output === card._contentText && card.querySelector('[data-testid="tool-content"]')) return;
	const details = el('details', 'tool-output');
	details.dataset.testid = 'tool-output';
	// The newline that ends the last line starts no line of its own.
	const lines = output.replace(/\n$/, '').split('\n').length;
	details.open = output !== '' && lines <= 12;
	details.append(el('summary', '', output === '' ? 'no output' : `output (${lines} line${lines === 1 ? '' : 's'})${r.truncated ? ' (truncated)' : ''}`));
	details.append(el('pre', 'tool-output-text', output));
	toolSlot(card, 'tool-output').before(details);
}

function formatDuration(ms) {
	if (!Number.isFinite(ms)) return '';
	return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
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

// mark flags an entry's message (data-<flag>="true") and appends its
// marker, <span class="entry-marker" data-testid=testid>text</span>,
// unless the entry has one that matches present already.
function mark(wrap, flag, testid, text, present) {
	wrap.querySelector('.msg').dataset[flag] = 'true';
	if (wrap.querySelector(present)) return;
	const marker = document.createElement('span');
	marker.className = 'entry-marker';
	marker.dataset.testid = testid;
	marker.textContent = text;
	const meta = wrap.querySelector(':scope > .entry-meta');
	if (meta) meta.before(marker);
	else wrap.append(marker);
}

function markInterrupted(wrap) {
	mark(wrap, 'interrupted', 'interrupted', '[interrupted]', '.entry-marker');
}

function markIncomplete(wrap) {
	mark(wrap, 'incomplete', 'incomplete', '(incomplete)', '[data-testid="incomplete"]');
}


function stderrTail(err) {
	const tail = err?.data?.stderr_tail;
	if (Array.isArray(tail)) return tail.join('\n');
	return tail ? String(tail) : '';
}

export { stderrTail };
