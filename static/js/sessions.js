// Renders the session lists.
//
// Live sessions: <li data-testid="session-item" data-session-id="..."> with
// the title, the state and the resume/close buttons; the current session has
// class "current".
//
// Closed sessions (session.list {include_closed: true}), in the collapsed
// "Closed" section: <li data-testid="closed-session" data-session-id="...">
// with the title, when and why it closed, and the reopen/delete buttons.
//
// Search hits (session.search): <li data-testid="search-hit"
// data-session-id="..." data-seq="..."> with the title and the snippet, the
// words of the query marked (<mark>, made with DOM nodes, never HTML).
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
	const items = sorted.map((s) => sessionItem(s, s.session_id === currentId, errors.get(s.session_id)));
	if (items.length === 0) {
		const li = document.createElement('li');
		li.className = 'session-empty';
		li.textContent = 'No sessions';
		items.push(li);
	}
	morphChildren(ul, items);
}

function sessionItem(s, current, error) {
	const li = document.createElement('li');
	li.className = 'session-item';
	li.classList.toggle('current', current);
	li.classList.toggle('closed', isGone(s));
	li.dataset.testid = 'session-item';
	li.dataset.sessionId = s.session_id;
	li.title = [
		s.session_id,
		`created ${s.created_at ?? '?'}`,
		`last active ${s.last_active ?? '?'}`,
		`viewers ${s.viewers ?? '?'}`,
	].join('\n');

	const title = document.createElement('span');
	title.className = 'session-title';
	title.textContent = s.title || s.session_id;

	const info = document.createElement('span');
	info.className = 'session-info';
	const state = document.createElement('span');
	state.className = 'session-state';
	state.dataset.state = s.state ?? '';
	state.textContent = s.state ?? '';
	info.append(state);
	if (s.running) {
		const running = document.createElement('span');
		running.className = 'session-running';
		running.textContent = 'running';
		info.append(running);
	}

	const actions = document.createElement('span');
	actions.className = 'session-actions';
	// The current session is not offered to itself.
	if (!current) {
		const resume = button('Resume', 'session-resume', 'btn');
		resume.disabled = isGone(s);
		resume.setAttribute('aria-label', `Resume ${s.title || s.session_id}`);
		actions.append(resume);
	} else {
		li.setAttribute('aria-current', 'true');
	}
	const close = button('Close', 'session-close', 'btn btn-danger');
	close.disabled = isGone(s);
	close.setAttribute('aria-label', `Close ${s.title || s.session_id}`);
	actions.append(close);

	li.append(title, info, actions);
	if (error) li.append(sessionError(error));
	return li;
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
 * @param {Array<object>} closed closed sessions, newest closed first
 * @param {string|null} currentId
 */
export function renderClosed(ul, closed, currentId, errors = new Map()) {
	const items = closed.map((s) => closedItem(s, s.session_id === currentId, errors.get(s.session_id)));
	if (items.length === 0) {
		const li = document.createElement('li');
		li.className = 'session-empty';
		li.textContent = 'No closed sessions';
		items.push(li);
	}
	morphChildren(ul, items);
}

function closedItem(s, current, error) {
	const li = document.createElement('li');
	li.className = 'session-item closed-session';
	li.classList.toggle('current', current);
	li.dataset.testid = 'closed-session';
	li.dataset.sessionId = s.session_id;
	li.title = [s.session_id, `created ${s.created_at ?? '?'}`, `closed ${s.closed_at ?? '?'}`].join('\n');

	const title = document.createElement('span');
	title.className = 'session-title';
	title.textContent = s.title || s.session_id;

	const info = document.createElement('span');
	info.className = 'session-info';
	const reason = document.createElement('span');
	reason.className = 'session-state';
	reason.dataset.state = 'closed';
	reason.dataset.testid = 'closed-reason';
	reason.dataset.reason = s.end_reason ?? '';
	reason.textContent = endLabel(s.end_reason);
	const when = document.createElement('time');
	when.dataset.testid = 'closed-when';
	when.className = 'closed-when';
	if (s.closed_at) when.dateTime = String(s.closed_at);
	when.textContent = shortTime(s.closed_at);
	info.append(reason, when);

	const actions = document.createElement('span');
	actions.className = 'session-actions';
	const name = s.title || s.session_id;
	const reopen = button('Reopen', 'reopen', 'btn');
	reopen.setAttribute('aria-label', `Reopen ${name}`);
	const del = button('Delete', 'delete', 'btn btn-danger');
	del.setAttribute('aria-label', `Delete ${name}`);
	actions.append(reopen, del);

	li.append(title, info, actions);
	if (error) li.append(sessionError(error));
	return li;
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
		li.tabIndex = 0;
		const title = document.createElement('span');
		title.className = 'search-hit-title';
		title.textContent = h.title || h.session_id;
		const snippet = document.createElement('span');
		snippet.className = 'search-hit-snippet';
		snippet.dataset.testid = 'search-snippet';
		snippet.append(...highlight(h.snippet ?? '', query));
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
 * The nodes of text with every whole word of query (case-insensitive, as
 * session.search matches) in a <mark>: text nodes and <mark>s only.
 */
export function highlight(text, query) {
	const words = String(query)
		.toLowerCase()
		.split(/[^\p{L}\p{N}_]+/u)
		.filter(Boolean);
	if (words.length === 0) return [document.createTextNode(text)];
	const nodes = [];
	const re = /[\p{L}\p{N}_]+/gu;
	let last = 0;
	for (let m; (m = re.exec(text)); ) {
		if (!words.includes(m[0].toLowerCase())) continue;
		if (m.index > last) nodes.push(document.createTextNode(text.slice(last, m.index)));
		const mark = document.createElement('mark');
		mark.dataset.testid = 'search-mark';
		mark.textContent = m[0];
		nodes.push(mark);
		last = m.index + m[0].length;
	}
	if (last < text.length) nodes.push(document.createTextNode(text.slice(last)));
	return nodes;
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
