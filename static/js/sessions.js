// Renders the session lists.
//
// Live sessions: <li data-testid="session-item" data-session-id="..."> with
// the title (data-testid="session-title"), the state and the resume, rename
// and close buttons; the current session has class "current". A session of
// an ACP agent (session.list's agent) names it in either list
// (data-testid="session-agent"); the built-in worker's shows nothing more. Renaming
// (app.js) puts an <input data-testid="rename-input"> in the title's place.
//
// Closed sessions (session.list {include_closed: true}), in the collapsed
// "Closed" section: <li data-testid="closed-session" data-session-id="...">
// with the title, when and why it closed, and the reopen/delete buttons.
//
// Search hits (session.search): <li data-testid="search-hit"
// data-session-id="..." data-seq="..." data-kind="..."> with the title and
// the snippet, the word prefixes the query matched marked (<mark>, made with
// DOM nodes, never HTML). A reply's snippet reads as the reply does, without
// its Markdown marks; other entries are shown as they were written.
// Every text is set with textContent. A list is updated in place (morph.js):
// an item that did not change is the same node after a refresh.
//
// A live session whose resume failed shows why under it
// (data-testid="session-error"), not in the chat of the current session.

import { morphChildren } from './morph.js';
import { endLabel } from './notices.js';

/** A session that can no longer be resumed. */
export function isGone(s) {
	return s.state === 'closed' || s.state === 'closing';
}

/**
 * @param {HTMLUListElement} ul
 * @param {Array<object>} sessions as returned by session.list
 * @param {string|null} currentId
 */
export function renderSessions(ul, sessions, currentId, errors = new Map()) {
	const sorted = [...sessions].sort(
		(a, b) => String(a.created_at).localeCompare(String(b.created_at)) || String(a.session_id).localeCompare(String(b.session_id)),
	);
	renderList(ul, sorted, currentId, errors, LIVE);
}

/**
 * @param {HTMLUListElement} ul
 * @param {Array<object>} closed closed sessions, newest closed first
 * @param {string|null} currentId
 */
export function renderClosed(ul, closed, currentId, errors = new Map()) {
	renderList(ul, closed, currentId, errors, CLOSED);
}

/**
 * What tells a list's rows apart: the one place where the live and the
 * closed lists differ.
 * @typedef {object} RowKind
 * @property {string} testid data-testid of a row
 * @property {string} className classes of a row
 * @property {string} empty the text of an empty list
 * @property {(s: object) => boolean} dimmed a row shown as closed (class "closed")
 * @property {boolean} ariaCurrent the current row says so (aria-current)
 * @property {(s: object) => string[]} tooltip the lines of the row's title
 * @property {(s: object) => Node[]} info what follows the title
 * @property {(s: object, current: boolean, name: string) => HTMLButtonElement[]} actions the row's buttons
 */

/** @type {RowKind} */
const LIVE = {
	testid: 'session-item',
	className: 'session-item',
	empty: 'No sessions',
	dimmed: isGone,
	ariaCurrent: true,
	tooltip: (s) => [`created ${s.created_at ?? '?'}`, `last active ${s.last_active ?? '?'}`, `tabs ${s.pages ?? '?'}`, `sockets ${s.viewers ?? '?'}`],
	info(s) {
		const state = span('session-state', s.state ?? '');
		state.dataset.state = s.state ?? '';
		return s.running ? [state, span('session-running', 'running')] : [state];
	},
	actions(s, current, name) {
		const out = [];
		// A session moving to another node (app.js keepMoving) waits, as a
		// gone one does: its node answers for it once it is adopted.
		const idle = isGone(s) || s.state === 'moving';
		// The current session is not offered to itself.
		if (!current) {
			const resume = button('Resume', 'session-resume', 'btn');
			resume.disabled = idle;
			resume.setAttribute('aria-label', `Resume ${name}`);
			out.push(resume);
		}
		// Rename in place: this button or a double-click on the title
		// (app.js turns the title into an input).
		const rename = button('Rename', 'session-rename', 'btn');
		rename.disabled = idle;
		rename.setAttribute('aria-label', `Rename ${name}`);
		out.push(rename);
		const close = button('Close', 'session-close', 'btn btn-danger');
		close.disabled = idle;
		close.setAttribute('aria-label', `Close ${name}`);
		out.push(close);
		return out;
	},
};

/** @type {RowKind} */
const CLOSED = {
	testid: 'closed-session',
	className: 'session-item closed-session',
	empty: 'No closed sessions',
	dimmed: () => false, // closed-session says it already
	ariaCurrent: false,
	tooltip: (s) => [`created ${s.created_at ?? '?'}`, `closed ${s.closed_at ?? '?'}`],
	info(s) {
		const reason = span('session-state', endLabel(s.end_reason));
		reason.dataset.state = 'closed';
		reason.dataset.testid = 'closed-reason';
		reason.dataset.reason = s.end_reason ?? '';
		const when = document.createElement('time');
		when.dataset.testid = 'closed-when';
		when.className = 'closed-when';
		if (s.closed_at) when.dateTime = String(s.closed_at);
		when.textContent = shortTime(s.closed_at);
		return [reason, when];
	},
	actions(s, current, name) {
		const reopen = button('Reopen', 'reopen', 'btn');
		reopen.setAttribute('aria-label', `Reopen ${name}`);
		const del = button('Delete', 'delete', 'btn btn-danger');
		del.setAttribute('aria-label', `Delete ${name}`);
		return [reopen, del];
	},
};

function renderList(ul, sessions, currentId, errors, kind) {
	const items = sessions.map((s) => sessionRow(s, s.session_id === currentId, errors.get(s.session_id), kind));
	if (items.length === 0) {
		const li = document.createElement('li');
		li.className = 'session-empty';
		li.textContent = kind.empty;
		items.push(li);
	}
	morphChildren(ul, items);
}

/** One row of either list: the title, kind's info and buttons, and the error of a failed resume. */
function sessionRow(s, current, error, kind) {
	const li = document.createElement('li');
	li.className = kind.className;
	li.classList.toggle('current', current);
	li.classList.toggle('closed', kind.dimmed(s));
	li.dataset.testid = kind.testid;
	li.dataset.sessionId = s.session_id;
	li.title = [s.session_id, ...kind.tooltip(s)].join('\n');
	if (current && kind.ariaCurrent) li.setAttribute('aria-current', 'true');

	const name = s.title || s.session_id;
	const info = document.createElement('span');
	info.className = 'session-info';
	if (typeof s.agent === 'string' && s.agent) {
		const agent = span('session-agent', s.agent);
		agent.dataset.testid = 'session-agent';
		agent.title = `agent ${s.agent}`;
		info.append(agent);
	}
	info.append(...kind.info(s));
	const actions = document.createElement('span');
	actions.className = 'session-actions';
	actions.append(...kind.actions(s, current, name));

	const title = span('session-title', name);
	title.dataset.testid = 'session-title';
	li.append(title, info, actions);
	if (error) li.append(sessionError(error));
	return li;
}

function span(className, text) {
	const e = document.createElement('span');
	e.className = className;
	e.textContent = text;
	return e;
}

function sessionError(text) {
	const e = document.createElement('div');
	e.className = 'session-error';
	e.dataset.testid = 'session-error';
	e.setAttribute('role', 'alert');
	e.textContent = text;
	return e;
}

function button(label, testid, className) {
	const b = document.createElement('button');
	b.type = 'button';
	b.className = className;
	b.dataset.testid = testid;
	b.textContent = label;
	return b;
}

/**
 * @param {HTMLUListElement} ul
 * @param {Array<object>|null} hits null: no search (the list is hidden)
 */
export function renderHits(ul, hits, query = '') {
	if (hits === null) {
		ul.hidden = true;
		ul.replaceChildren();
		return;
	}
	const items = hits.map((h) => {
		const li = document.createElement('li');
		li.className = 'search-hit';
		li.dataset.testid = 'search-hit';
		li.dataset.sessionId = h.session_id;
		li.dataset.seq = String(h.seq ?? '');
		li.dataset.kind = h.kind ?? '';
		li.tabIndex = 0;
		const title = document.createElement('span');
		title.className = 'search-hit-title';
		title.textContent = h.title || h.session_id;
		const snippet = document.createElement('span');
		snippet.className = 'search-hit-snippet';
		snippet.dataset.testid = 'search-snippet';
		const text = String(h.snippet ?? '');
		snippet.append(...highlight(h.kind === 'reply' ? plainSnippet(text) : text, query));
		li.append(title, snippet);
		return li;
	});
	if (items.length === 0) {
		const li = document.createElement('li');
		li.className = 'session-empty';
		li.textContent = 'No matches';
		items.push(li);
	}
	morphChildren(ul, items);
	ul.hidden = false;
}

/**
 * The nodes of text with the start of each of its words that a word of
 * query begins (case-insensitive, as session.search matches: `pomegran`
 * marks the first eight letters of "Pomegranate") in a <mark>: text nodes
 * and <mark>s only. Words are runs of letters and digits, as the stores
 * split them.
 */
export function highlight(text, query) {
	const words = String(query)
		.toLowerCase()
		.split(/[^\p{L}\p{N}]+/u)
		.filter(Boolean);
	if (words.length === 0) return [document.createTextNode(text)];
	const nodes = [];
	const re = /[\p{L}\p{N}]+/gu;
	let last = 0;
	for (let m; (m = re.exec(text)); ) {
		const lower = m[0].toLowerCase();
		const w = words.filter((x) => lower.startsWith(x)).reduce((a, b) => (b.length > a.length ? b : a), '');
		if (!w) continue;
		// The matched prefix; the whole word when lower-casing changed its length.
		const end = m.index + (lower.length === m[0].length ? w.length : m[0].length);
		if (m.index > last) nodes.push(document.createTextNode(text.slice(last, m.index)));
		const mark = document.createElement('mark');
		mark.dataset.testid = 'search-mark';
		mark.textContent = text.slice(m.index, end);
		nodes.push(mark);
		last = end;
	}
	if (last < text.length) nodes.push(document.createTextNode(text.slice(last)));
	return nodes;
}

/**
 * A reply's snippet as the rendered reply reads, on one line: without
 * fence lines, a line's heading, quote and bullet marks, link syntax
 * ([text](url) is its text), code marks (a code span's text is kept as
 * is) and emphasis marks. A snippet is cut out of the text anywhere, so
 * this is no Markdown parser: an emphasis mark (a run of *, _ or ~) goes
 * when it touches a word or a code span on one side only (**bold**, _it_,
 * a closing ** whose opening was cut off), and stays inside a word
 * (snake_case) or between spaces (2 * 3).
 */
export function plainSnippet(text) {
	return String(text)
		.replace(/^[ \t]*(`{3,}|~{3,}).*$/gm, '')
		.replace(/^[ \t]*(#{1,6}|>[> ]*|[-*+])[ \t]+/gm, '')
		.replace(/!?\[([^\]\n]*)\]\([^)\s]*(?:\s+"[^"\n]*")?\)/g, '$1')
		.replace(/\]\([^)\s]*\)/g, '')
		.replace(
			/(`+)([^`]+?)\1(?!`)|`+|(?<![\p{L}\p{N}`])[*_~]+(?=[\p{L}\p{N}`])|(?<=[\p{L}\p{N}`])[*_~]+(?![\p{L}\p{N}`])/gu,
			(_, ticks, code) => code ?? '',
		)
		.replace(/\s+/g, ' ')
		.trim();
}

/** "14:05" today, "Mar 3, 14:05" this year, else "Mar 3, 2025". */
function shortTime(t) {
	const d = new Date(t);
	if (!t || Number.isNaN(d.getTime())) return '';
	const now = new Date();
	if (d.toDateString() === now.toDateString()) return d.toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit' });
	if (d.getFullYear() === now.getFullYear()) {
		return d.toLocaleString(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });
	}
	return d.toLocaleDateString(undefined, { year: 'numeric', month: 'short', day: 'numeric' });
}
