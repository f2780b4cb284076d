// Renders the session list. Each item is
// <li data-testid="session-item" data-session-id="..."> with the title, the
// state and the resume/close buttons; the current session has class "current".

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
