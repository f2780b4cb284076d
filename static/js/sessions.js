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
// data-session-id="..." data-seq="..."> with the title and the snippet.
// Every text is set with textContent.

/** A session that can no longer be resumed. */
export function isGone(s) {
	return s.state === 'closed' || s.state === 'closing';
}

/**
 * @param {HTMLUListElement} ul
 * @param {Array<object>} sessions as returned by session.list
 * @param {string|null} currentId
 */
export function renderSessions(ul, sessions, currentId) {
	const sorted = [...sessions].sort(
		(a, b) => String(a.created_at).localeCompare(String(b.created_at)) || String(a.session_id).localeCompare(String(b.session_id)),
	);
	const items = sorted.map((s) => sessionItem(s, s.session_id === currentId));
	if (items.length === 0) {
		const li = document.createElement('li');
		li.className = 'session-empty';
		li.textContent = 'No sessions';
		items.push(li);
	}
	ul.replaceChildren(...items);
}

function sessionItem(s, current) {
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
	const resume = button('Resume', 'session-resume', 'btn');
	resume.disabled = isGone(s);
	const close = button('Close', 'session-close', 'btn btn-danger');
	close.disabled = isGone(s);
	actions.append(resume, close);

	li.append(title, info, actions);
	return li;
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
export function renderClosed(ul, closed, currentId) {
	const items = closed.map((s) => closedItem(s, s.session_id === currentId));
	if (items.length === 0) {
		const li = document.createElement('li');
		li.className = 'session-empty';
		li.textContent = 'No closed sessions';
		items.push(li);
	}
	ul.replaceChildren(...items);
}

function closedItem(s, current) {
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
	reason.textContent = s.end_reason || 'closed';
	const when = document.createElement('span');
	when.textContent = shortTime(s.closed_at);
	info.append(reason, when);

	const actions = document.createElement('span');
	actions.className = 'session-actions';
	actions.append(button('Reopen', 'reopen', 'btn'), button('Delete', 'delete', 'btn btn-danger'));

	li.append(title, info, actions);
	return li;
}

/**
 * @param {HTMLUListElement} ul
 * @param {Array<object>|null} hits null: no search (the list is hidden)
 */
export function renderHits(ul, hits) {
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
		snippet.textContent = h.snippet ?? '';
		li.append(title, snippet);
		return li;
	});
	if (items.length === 0) {
		const li = document.createElement('li');
		li.className = 'session-empty';
		li.textContent = 'No matches';
		items.push(li);
	}
	ul.replaceChildren(...items);
	ul.hidden = false;
}

function shortTime(t) {
	const d = new Date(t);
	if (!t || Number.isNaN(d.getTime())) return '';
	return d.toLocaleString(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });
}
