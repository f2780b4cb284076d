// dashgate dashboard: session list, chat (ws/chat, JSON-RPC 2.0) and terminal
// (ws/pty). Entry point, loaded as an ES module by templates/dashboard.templ;
// xterm.js and its fit addon are classic scripts loaded before it.
//
// localStorage keys:
//   dashgate.session          id of the current session
//   dashgate.pty.<session_id> {"resume_token","offset"} of that session's terminal
//
// window.dashgate exposes hooks for browser tests, see the end of this file.

import { ChatLog } from './chat.js';
import { wsURL } from './net.js';
import { ChatClient, RpcError } from './rpc.js';
import { isGone, renderSessions } from './sessions.js';
import { PTY_STORAGE_PREFIX, TerminalPane } from './terminal.js';

const SESSION_KEY = 'dashgate.session';
const LIST_REFRESH_DELAY_MS = 150;

const base = document.body.dataset.basePath || '/';
const byTestId = (id) => document.querySelector(`[data-testid="${id}"]`);
const els = {
	list: byTestId('session-list'),
	newSession: byTestId('new-session'),
	log: byTestId('chat-log'),
	form: byTestId('chat-form'),
	input: byTestId('chat-input'),
	status: byTestId('conn-status'),
	terminal: byTestId('terminal'),
};

const chat = new ChatLog(els.log);
const terminal = new TerminalPane(els.terminal, base);
const rpc = new ChatClient(wsURL(base, 'ws/chat'), { onReady, onEvent, onStatus });

let current = null; // id of the current session
let currentGone = false; // the current session was closed under us
let sessions = []; // last session.list result
const streaming = new Set(); // turn_ids of the current session still streaming

// Session changes (create, resume, close, the choice after a reconnect) run
// one at a time, in order, so that clicks and reconnects never interleave.
let queue = Promise.resolve();
function serial(fn) {
	const run = queue.then(fn).catch((err) => chat.addError(err));
	queue = run;
	return run;
}

// explicit: the user asked for this session (a click), so a terminal that
// was taken over by another tab is taken back; a reconnect never does that.
function setCurrent(id, explicit) {
	const previous = current;
	current = id;
	// Stop viewing the session left behind, so its worker is closed now
	// rather than when the tab goes (session.detach, docs/PROTOCOL.md §7).
	if (previous && previous !== id && rpc.ready) {
		rpc.call('session.detach', { session_id: previous }).catch(() => {});
	}
	currentGone = false;
	streaming.clear();
	localStorage.setItem(SESSION_KEY, id);
	renderSessions(els.list, sessions, current);
	terminal.attach(id, explicit);
}

async function refresh() {
	if (!rpc.ready) return;
	const r = await rpc.call('session.list');
	sessions = Array.isArray(r.sessions) ? r.sessions : [];
	renderSessions(els.list, sessions, current);
}

let refreshTimer = 0;
function refreshSoon() {
	clearTimeout(refreshTimer);
	refreshTimer = setTimeout(() => {
		refresh().catch((err) => console.warn('dashgate: session.list', err));
	}, LIST_REFRESH_DELAY_MS);
}

async function resume(id, explicit = false) {
	const r = await rpc.call('session.resume', { session_id: id });
	chat.clear();
	setCurrent(id, explicit);
	for (const m of r.history ?? []) chat.add(m.role, m.text ?? '');
	if (r.running) chat.add('system', 'a reply is still being written');
	await refresh();
}

function nextTitle() {
	let n = 0;
	for (const s of sessions) {
		const m = /^session (\d+)$/.exec(s.title ?? '');
		if (m) n = Math.max(n, Number(m[1]));
	}
	return `session ${n + 1}`;
}

async function create() {
	const r = await rpc.call('session.create', { title: nextTitle() });
	chat.clear();
	setCurrent(r.session_id, true);
	await refresh();
}

/** Resumes the first live session other than `except`, or creates one. */
async function pickAnother(except) {
	const next = sessions.find((s) => s.session_id !== except && !isGone(s));
	if (next) {
		try {
			await resume(next.session_id);
			return;
		} catch (err) {
			if (!(err instanceof RpcError) || err.code !== 4001) throw err;
		}
	}
	await create();
}

async function closeSession(id) {
	await rpc.call('session.close', { session_id: id });
	localStorage.removeItem(PTY_STORAGE_PREFIX + id);
	await refresh();
	if (id === current) await pickAnother(id);
}

// On every new chat socket: list, then resume the current (or stored) session
// if it is still alive, else create one.
function onReady() {
	serial(async () => {
		await refresh();
		const want = current ?? localStorage.getItem(SESSION_KEY);
		const s = sessions.find((x) => x.session_id === want);
		if (s && !isGone(s)) {
			try {
				await resume(want);
				return;
			} catch (err) {
				if (!(err instanceof RpcError) || err.code !== 4001) throw err;
			}
		}
		await create();
	});
}

function onEvent(ev) {
	const sid = ev.session_id;
	const p = ev.payload ?? {};
	if (sid && sid !== current) {
		if (ev.type !== 'message.delta') refreshSoon();
		return;
	}
	switch (ev.type) {
		case 'message.delta':
			if (!streaming.has(p.turn_id)) {
				streaming.add(p.turn_id);
				refreshSoon(); // "running" changed
			}
			chat.delta(p.turn_id, p.text ?? '');
			break;
		case 'message.complete':
			streaming.delete(p.turn_id);
			chat.complete(p.turn_id, p.text, Boolean(p.interrupted));
			refreshSoon();
			break;
		case 'session.closed':
			if (sid === current && !currentGone) {
				currentGone = true;
				streaming.clear();
				chat.add('system', `session closed (${p.end_reason ?? 'unknown'}); the next message starts a new session`);
				terminal.stop('session closed');
			}
			refreshSoon();
			break;
		case 'worker.exited': {
			const code = p.exit_code ?? '?';
			chat.add('system', `worker exited (${p.reason ?? 'unknown'}, exit code ${code}); the next message restarts it`);
			refreshSoon();
			break;
		}
		case 'error':
			chat.add('error', p.message ?? 'error');
			break;
		default:
			console.debug('dashgate: unhandled event', ev);
	}
}

function onStatus(status) {
	els.status.textContent = status;
	els.status.dataset.state = status;
}

async function submit(line) {
	const text = line.trim();
	if (!text) return;
	await queue; // a session change in progress decides where the line goes
	if (current === null || currentGone) {
		await serial(create);
		if (current === null || currentGone) return; // create failed and said so
	}
	const sid = current;
	chat.add('user', line);
	try {
		if (text.startsWith('/')) {
			const r = await rpc.call('slash.exec', { session_id: sid, command: text });
			if (sid === current) chat.add('assistant', r.output ?? '');
		} else {
			await rpc.call('prompt.submit', { session_id: sid, text: line });
		}
	} catch (err) {
		if (sid === current) chat.addError(err);
	}
}

els.form.addEventListener('submit', (ev) => {
	ev.preventDefault();
	const line = els.input.value;
	els.input.value = '';
	submit(line);
});

// Escape in the chat input interrupts the running turn.
els.input.addEventListener('keydown', (ev) => {
	if (ev.key !== 'Escape' || streaming.size === 0 || !current) return;
	ev.preventDefault();
	rpc.call('session.interrupt', { session_id: current }).catch((err) => chat.addError(err));
});

els.newSession.addEventListener('click', () => serial(create));

els.list.addEventListener('click', (ev) => {
	const li = ev.target.closest('[data-testid="session-item"]');
	if (!li) return;
	const id = li.dataset.sessionId;
	const button = ev.target.closest('button');
	if (button?.disabled) return;
	if (button?.dataset.testid === 'session-close') {
		serial(() => closeSession(id));
	} else if (button?.dataset.testid === 'session-resume' || (!button && id !== current && !li.classList.contains('closed'))) {
		serial(() => resume(id, true));
	}
});

window.dashgate = {
	term: terminal.term,
	currentSession: () => current,
	terminalText: () => terminal.text(),
	chatSocketState: () => rpc.state(),
	ptySocketState: () => terminal.state(),
};

rpc.start();
