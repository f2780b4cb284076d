// dashgate dashboard: session list, chat (ws/chat, JSON-RPC 2.0) and terminal
// (ws/pty). Entry point, loaded as an ES module by templates/dashboard.templ;
// xterm.js and its fit addon are classic scripts loaded before it.
//
// localStorage keys:
//   dashgate.session          id of the current session
//   dashgate.pty.<session_id> {"resume_token","offset"} of that session's (first) terminal
//   dashgate.pty.<session_id>.<terminal>, dashgate.termtabs.<session_id>: its other terminals' (terminal_tabs.js)
//   dashgate.sent             the last prompts and commands sent (Up/Down in the input)
//   dashgate.agent            the agent last picked for a new session (agent.list's name)
//   dashgate.draft.<session_id> what was typed in the input for that session and not sent yet
//   (layout.js keeps the layout's own keys)
//
// window.dashgate exposes hooks for browser tests, see the end of this file.

import { ChatLog, errorSentence, setAttachmentHref, stderrTail } from './chat.js';
import { AttachmentTray, attachmentURL, formatBytes } from './attachments.js';
import { followLog, initLayout } from './layout.js';
import { Notifier } from './notify.js';
import { wsURL } from './net.js';
import { connectionText, endNotice, NOT_SENT, workerNotice } from './notices.js';
import { renderCommands, renderPlan, slashMatches } from './agents.js';
import { ChatClient, RpcError } from './rpc.js';
import { isGone, renderClosed, renderHits, renderSessions } from './sessions.js';
import { Settings } from './settings.js';
import { initShortcuts } from './shortcuts.js';
import { TerminalTabs } from './terminal_tabs.js';

const SESSION_KEY = 'dashgate.session';
const LIST_REFRESH_DELAY_MS = 150;
const SEARCH_DELAY_MS = 200;
const HISTORY_PAGE = 200;
const SENT_KEY = 'dashgate.sent';
const AGENT_KEY = 'dashgate.agent';
const DRAFT_PREFIX = 'dashgate.draft.';
// Stands for the running turn of a session resumed mid-turn (its id is not known).
const RESUMED_TURN = '(resumed)';
// The notice of an administrator's end of the session's terminal (sessions/reasons.go).
const TERMINAL_REAP_NOTICE = 'terminal ended by an administrator';
const SENT_MAX = 100;
// Said after a resume when the reply that was streaming as the socket went
// is stored cut short (issue 41).
const CUT_NOTE = 'The reply above was cut short: the server writing it stopped. The conversation goes on here.';

const base = document.body.dataset.basePath || '/';
const byTestId = (id) => document.querySelector(`[data-testid="${id}"]`);
const els = {
	list: byTestId('session-list'),
	newSession: byTestId('new-session'),
	agentPicker: byTestId('agent-picker'),
	chatAgent: byTestId('chat-agent'),
	plan: byTestId('plan'),
	planList: byTestId('plan-list'),
	slashList: byTestId('slash-list'),
	log: byTestId('chat-log'),
	moving: byTestId('session-moving'),
	noSession: byTestId('no-session'),
	form: byTestId('chat-form'),
	input: byTestId('chat-input'),
	status: byTestId('conn-status'),
	terminal: byTestId('terminal'),
	closed: byTestId('closed-sessions'),
	closedList: byTestId('closed-list'),
	closedCount: byTestId('closed-count'),
	closedMore: byTestId('closed-more'),
	search: byTestId('search-input'),
	hits: byTestId('search-results'),
	historyMore: byTestId('history-more'),
	modelPicker: byTestId('model-picker'),
	chatModel: byTestId('chat-model'),
	exportBox: byTestId('chat-export'),
	exportMarkdown: byTestId('export-markdown'),
	exportJSON: byTestId('export-json'),
	send: byTestId('chat-send'),
	stop: byTestId('chat-stop'),
	pending: byTestId('pending'),
	pendingText: byTestId('pending-text'),
	jumpNew: byTestId('jump-new'),
};

// This page's id, sent on both sockets (?page=): the admin page counts a
// tab's chat and terminal sockets as one viewer (docs/PROTOCOL.md §7).
const pageId = crypto.randomUUID ? crypto.randomUUID() : String(Math.random()).slice(2) + String(Date.now());

const chat = new ChatLog(els.log, { onRegenerate: regenerate });
// Files for the next prompt: picked, dropped on the chat or pasted, uploaded
// into the current session (made first when there is none), shown as chips.
const tray = new AttachmentTray(
	base,
	{
		chips: byTestId('attach-chips'),
		error: byTestId('attach-error'),
		button: byTestId('attach-button'),
		input: byTestId('attach-input'),
		drop: document.querySelector('.chat-pane'),
		paste: els.input,
	},
	async () => {
		await queue;
		if (current === null || currentGone) await serial(create);
		return current !== null && !currentGone ? current : null;
	},
);
setAttachmentHref((aid) => (current ? attachmentURL(base, current, aid) : null));
// The terminal pane: a tab per terminal of the session (terminal_tabs.js).
const terminal = new TerminalTabs(els.terminal, base, {
	page: pageId,
	status: byTestId('terminal-status'),
	text: byTestId('terminal-status-text'),
	restart: byTestId('terminal-restart'),
	keys: byTestId('term-keys'),
	shared: byTestId('terminal-shared'),
	sharedText: byTestId('terminal-shared-text'),
	takeover: byTestId('terminal-takeover'),
	recorded: byTestId('terminal-recorded'),
	start: () => serial(create),
	search: {
		bar: byTestId('terminal-search'),
		input: byTestId('terminal-search-input'),
		prev: byTestId('terminal-search-prev'),
		next: byTestId('terminal-search-next'),
		status: byTestId('terminal-search-status'),
		close: byTestId('terminal-search-close'),
		open: byTestId('terminal-search-open'),
	},
	files: {
		line: byTestId('terminal-transfer'),
		text: byTestId('terminal-transfer-text'),
		dismiss: byTestId('terminal-transfer-close'),
		row: byTestId('terminal-download'),
		path: byTestId('terminal-download-path'),
		go: byTestId('terminal-download-go'),
		close: byTestId('terminal-download-close'),
		open: byTestId('terminal-download-open'),
	},
	head: byTestId('terminal-head'),
	tabs: byTestId('terminal-tabs'),
	newTab: byTestId('terminal-tab-new'),
	close: (sid, tid) => rpc.call('terminal.close', { session_id: sid, terminal: tid }).catch((err) => console.warn('dashgate: terminal.close', err)),
});
const layout = initLayout(() => terminal.refit());
const notifier = new Notifier(byTestId('notify-toggle'));
// The log follows new entries while the reader is at its end (layout.js).
const follow = followLog(els.log, els.jumpNew);
const rpc = new ChatClient(wsURL(base, 'ws/chat?page=' + encodeURIComponent(pageId)), { onReady, onEvent, onStatus });
// The user's settings (settings.js, issue 42): the Settings dialog, the
// theme and the terminal font; the default agent is where the picker starts.
const settings = new Settings(
	rpc,
	terminal,
	{
		dialog: byTestId('settings-dialog'),
		open: byTestId('settings-open'),
		form: byTestId('settings-form'),
		agent: byTestId('settings-agent'),
		model: byTestId('settings-model'),
		systemPrompt: byTestId('settings-system-prompt'),
		theme: byTestId('settings-theme'),
		fontSize: byTestId('settings-font-size'),
		fontFamily: byTestId('settings-font-family'),
		error: byTestId('settings-error'),
		cancel: byTestId('settings-cancel'),
		save: byTestId('settings-save'),
	},
	{ defaultAgent: preferAgent },
);

let current = null; // id of the current session
let currentGone = false; // the current session was closed under us
let sessions = []; // live sessions of the last session.list
let closed = []; // closed sessions listed so far, newest closed first
let closedMore = false; // older closed sessions exist beyond those
let loadedMore = false; // "Load more" was used: closed holds more than the first page
let oldestSeq = 0; // seq of the oldest history entry shown (0: none)
let restarting = false; // dashgate said it is restarting (session.closed, suspended)
const streaming = new Set(); // turn_ids of the current session still streaming
let resumedNote = null; // the "a reply is still being written" line of a resume, until nothing runs
let cutWatch = null; // the session whose reply was streaming when the chat socket went (its resume says if it was cut)
let models = null; // model.list's result ({models, default}), null until known
let modelsError = ''; // why model.list failed, if it did
let currentModel = ''; // the current session's model ("" for the default)
let agents = null; // agent.list's agents ([{name, kind, default}]), null until known
let agentsLoaded = null; // the promise of the last agent.list (create waits for it)
let currentAgent = ''; // the current session's ACP agent ("" for the built-in worker)
let commands = []; // the slash commands the current session's agent offers (commands.update)
let execs = 0; // slash commands of the current session waiting for their reply
let execSeq = 0; // bumped when the current session changes: replies of older ones do not count
const resumeErrors = new Map(); // session_id -> why its last resume (or rename) failed (shown under it)
let renaming = null; // {id, input} of the title being edited in the live list

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
// terminals: session.resume's, the terminals it runs (a tab each).
function setCurrent(id, explicit, terminals = null) {
	const previous = current;
	current = id;
	tray.sessionChanged(id); // files uploaded into another session and not sent go
	// Stop viewing the session left behind, so its worker is closed now
	// rather than when the tab goes (session.detach, docs/PROTOCOL.md §7).
	if (previous && previous !== id && rpc.ready) {
		rpc.call('session.detach', { session_id: previous }).catch(() => {});
	}
	if (previous !== id) clearMoving();
	currentGone = false;
	streaming.clear();
	execs = 0;
	execSeq++;
	resumeErrors.delete(id);
	if (previous !== id) {
		currentAgent = '';
		setPlan(null);
		setCommands([]);
		// The input shows this session's draft (a reload finds it too);
		// what was typed with no session shown stays, as this one's.
		const saved = localStorage.getItem(DRAFT_PREFIX + id);
		if (saved !== null || previous) setInput(saved ?? '');
		else saveDraft();
	}
	updateBusy();
	localStorage.setItem(SESSION_KEY, id);
	els.noSession.hidden = true;
	delete els.log.dataset.noSession;
	renderLists();
	terminal.attach(id, explicit, terminals);
	setExport(id);
}

// setExport points the export links at session id's download
// (GET sessions/{id}/export, handlers/export.go).
function setExport(id) {
	const url = (format) => base + 'sessions/' + encodeURIComponent(id) + '/export?format=' + format;
	els.exportMarkdown.href = url('markdown');
	els.exportJSON.href = url('json');
	els.exportBox.hidden = !id;
}

// What the lists were last rendered from: an unchanged list is not
// rendered again (a click must not land on a node that was just replaced).
let renderedLive = '';
let renderedClosed = '';

function renderLists() {
	const errors = [...resumeErrors];
	const live = JSON.stringify([sessions, current, errors]);
	// While a title is being edited the live list waits (a refresh would
	// take the input away); it is rendered when the edit ends.
	if (live !== renderedLive && !renaming) {
		renderedLive = live;
		renderSessions(els.list, sessions, current, resumeErrors);
	}
	const gone = JSON.stringify([closed, current, errors]);
	if (gone !== renderedClosed) {
		renderedClosed = gone;
		renderClosed(els.closedList, closed, current, resumeErrors);
	}
	const row = sessions.find((x) => x.session_id === current) ?? closed.find((x) => x.session_id === current);
	if (row) setAgent(typeof row.agent === 'string' ? row.agent : '');
	els.closedCount.textContent = closed.length ? `(${closed.length}${closedMore ? '+' : ''})` : '';
	els.closedMore.hidden = !closedMore;
}

/** Lists live sessions and the newest page of closed ones. */
async function refresh() {
	if (!rpc.ready) return;
	const r = await rpc.call('session.list', { include_closed: true });
	// Answered while dashgate shuts down (it said so first: session.closed,
	// suspended): its sessions were being suspended and are not in it, yet
	// they come back with it. Keep the list as it was until the reconnect.
	if (restarting) return;
	const all = Array.isArray(r.sessions) ? r.sessions : [];
	sessions = all.filter((s) => s.state !== 'closed');
	const page = all.filter((s) => s.state === 'closed');
	if (!loadedMore) {
		closed = page;
		closedMore = Boolean(r.more);
	} else {
		// Keep the older pages "Load more" brought, minus what is on the
		// fresh first page or live again (reopened); deleted ones are
		// dropped by deleteSession.
		const seen = new Set([...page, ...sessions].map((s) => s.session_id));
		const oldest = page.length ? String(page[page.length - 1].closed_at) : '';
		closed = [...page, ...closed.filter((s) => !seen.has(s.session_id) && String(s.closed_at) < oldest)];
	}
	renderLists();
}

/** Appends the next page of closed sessions. */
async function loadMoreClosed() {
	const last = closed[closed.length - 1];
	if (!last) return;
	const r = await rpc.call('session.list', { include_closed: true, before: last.closed_at });
	const known = new Set(closed.map((s) => s.session_id));
	for (const s of r.sessions ?? []) {
		if (s.state === 'closed' && !known.has(s.session_id)) closed.push(s);
	}
	closedMore = Boolean(r.more);
	loadedMore = true;
	renderLists();
}

let refreshTimer = 0;
function refreshSoon() {
	clearTimeout(refreshTimer);
	refreshTimer = setTimeout(() => {
		refresh().catch((err) => console.warn('dashgate: session.list', err));
	}, LIST_REFRESH_DELAY_MS);
}

/**
 * Resumes a session the user picked in the list. When that fails, why is
 * shown under that session (not in the chat of the current one) and the
 * list is refreshed (it was likely stale).
 */
async function resumeClicked(id) {
	try {
		await resume(id, true);
	} catch (err) {
		if (!(err instanceof RpcError)) throw err;
		resumeErrors.set(id, `Could not resume: ${errorSentence(err.code, err.message)}`);
		renderLists();
		await refresh();
	}
}

async function resume(id, explicit = false) {
	const r = await rpc.call('session.resume', { session_id: id });
	show(id, r, explicit);
	await refresh();
}

/** Makes a closed (or live) session current again, with its history. */
async function reopen(id) {
	const r = await rpc.call('session.reopen', { session_id: id });
	show(id, r, true);
	await refresh();
}

// On a node of a cluster (the header names the node), a request after each
// resume lets the node that now holds the session (it may have adopted it
// from a dead node) set the dashgate_node cookie nginx routes on: the
// socket that resumed was opened before. The answer is not read.
const clustered = !!document.querySelector('.meta[title="node"]');

function repin() {
	if (clustered) fetch(base + 'healthz', { cache: 'no-store', credentials: 'same-origin' }).catch(() => {});
}

/** Shows a session.resume / session.reopen result as the current session. */
function show(id, r, explicit) {
	repin();
	chat.clear();
	setCurrent(id, explicit, r.terminals);
	tray.restore(id, r.pending_attachments); // files uploaded and not sent: a reload finds them
	const history = Array.isArray(r.history) ? r.history : [];
	for (const e of history) chat.entry(e);
	follow.reset();
	if (Array.isArray(r.pending_approvals)) chat.syncApprovals(r.pending_approvals);
	const approving = Array.isArray(r.pending_approvals) && r.pending_approvals.length > 0;
	setModel(typeof r.model === 'string' ? r.model : '');
	setAgent(typeof r.agent === 'string' ? r.agent : '');
	setPlan(r.plan);
	setCommands(r.commands);
	oldestSeq = history.length ? Number(history[0].seq) || 0 : 0;
	els.historyMore.hidden = !(oldestSeq > 1);
	// The socket went while this reply streamed and no restart was said
	// (a kill -9, a dead node of a cluster): the reply stored is cut short.
	// Said here, once, not stored: the history marks it interrupted.
	const last = history.at(-1);
	if (cutWatch === id && !r.running && last?.kind === 'reply' && (last.interrupted || last.status === 'interrupted')) {
		chat.add('system', CUT_NOTE);
	}
	cutWatch = null;
	if (r.running) {
		// Its turn is not known here: Stop and the pending line show
		// until the next message.complete.
		streaming.add(RESUMED_TURN);
		setPending(approving ? 'waiting for your approval…' : 'a reply is still being written…');
		updateBusy();
		// Said while it is true: updateBusy removes it once the reply ended.
		resumedNote = chat.add('system', 'a reply is still being written');
	}
}

/** Prepends the page of history before the oldest entry shown. */
async function loadEarlier() {
	const sid = current;
	if (!sid || !(oldestSeq > 1)) return;
	const r = await rpc.call('session.history', { session_id: sid, before_seq: oldestSeq, limit: HISTORY_PAGE });
	if (sid !== current) return;
	const entries = Array.isArray(r.entries) ? r.entries : [];
	chat.prepend(entries);
	if (entries.length) oldestSeq = Number(entries[0].seq) || 0;
	els.historyMore.hidden = !r.more || !(oldestSeq > 1);
}

/** Deletes a session for good, after asking. */
async function deleteSession(id) {
	const s = closed.find((x) => x.session_id === id) ?? sessions.find((x) => x.session_id === id);
	const name = s?.title || id;
	if (!window.confirm(`Delete "${name}" and its whole conversation? This cannot be undone.`)) return;
	await rpc.call('session.delete', { session_id: id });
	terminal.forget(id);
	localStorage.removeItem(DRAFT_PREFIX + id);
	closed = closed.filter((x) => x.session_id !== id);
	await refresh();
	if (id === current) await pickAnother(id);
}

/** Opens the session of a search hit: resumed when live, else reopened. */
async function openHit(id) {
	const live = sessions.find((s) => s.session_id === id && !isGone(s));
	if (live) {
		try {
			await resume(id, true);
			return;
		} catch (err) {
			if (!(err instanceof RpcError) || err.code !== 4001) throw err;
		}
	}
	await reopen(id);
}

/** The entry of the chat log with that seq, if shown. */
function entryAt(seq) {
	return els.log.querySelector(`[data-testid="entry"][data-seq="${Number(seq)}"]`);
}

/**
 * Shows a search hit: opens its session when it is not the current one,
 * loads older history (session.history before_seq) until the entry is in
 * the log, scrolls it into view and highlights it for a moment.
 */
async function jumpToHit(id, seq) {
	if (id !== current || currentGone) await openHit(id);
	if (id !== current || !(seq > 0)) return;
	let el = entryAt(seq);
	if (!el && !(seq < oldestSeq) && !busy()) {
		// Among the entries shown, but shown live (they carry no seq):
		// show the conversation again from its history.
		await reloadHistory(id);
		el = entryAt(seq);
	}
	while (!el && id === current && seq < oldestSeq && oldestSeq > 1) {
		const before = oldestSeq;
		await loadEarlier();
		if (!(oldestSeq < before)) break;
		el = entryAt(seq);
	}
	if (!el || id !== current) return;
	follow.reveal(el);
	el.classList.remove('hit-flash');
	void el.offsetWidth; // a second jump to the same entry flashes again
	el.classList.add('hit-flash');
	el.addEventListener('animationend', () => el.classList.remove('hit-flash'), { once: true });
}

/** Renders the current session's latest history again (session.history). */
async function reloadHistory(id) {
	const r = await rpc.call('session.history', { session_id: id, limit: HISTORY_PAGE });
	if (id !== current || busy()) return;
	const entries = Array.isArray(r.entries) ? r.entries : [];
	chat.clear();
	for (const e of entries) chat.entry(e);
	follow.reset();
	oldestSeq = entries.length ? Number(entries[0].seq) || 0 : 0;
	els.historyMore.hidden = !(r.more && oldestSeq > 1);
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
	await agentsLoaded;
	const params = { title: nextTitle() };
	const agent = pickedAgent();
	if (agent) params.agent = agent;
	const r = await rpc.call('session.create', params);
	chat.clear();
	follow.reset();
	oldestSeq = 0;
	els.historyMore.hidden = true;
	setCurrent(r.session_id, true);
	// The server says what the session got (the user's default model, issue 42).
	setModel(typeof r.model === 'string' ? r.model : '');
	setAgent(typeof r.agent === 'string' ? r.agent : agents?.find((a) => a.name === agent)?.kind === 'acp' ? agent : '');
	await refresh();
}

/** Resumes the first live session other than `except`, or shows that none is open. */
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
	showNoSession();
}

/**
 * Shows that no session is open (a first visit, the last one closed): the
 * chat says how to start one and the terminal waits for it. The page
 * creates no session by itself: every visit of a browser without one
 * would leave an empty "session N" behind (issue 41). The first prompt
 * sent (submit), New session, or the terminal's "Start a session" makes
 * one; picking one from the list resumes it.
 */
function showNoSession() {
	if (current && rpc.ready) rpc.call('session.detach', { session_id: current }).catch(() => {});
	current = null;
	currentGone = false;
	streaming.clear();
	execs = 0;
	execSeq++;
	currentAgent = '';
	setPlan(null);
	setCommands([]);
	clearMoving();
	chat.clear();
	follow.reset();
	oldestSeq = 0;
	els.historyMore.hidden = true;
	localStorage.removeItem(SESSION_KEY);
	setAgent('');
	setModel('');
	updateBusy();
	renderLists();
	terminal.attach(null);
	setExport(null);
	els.noSession.hidden = false;
	els.log.dataset.noSession = ''; // its line says how to start: the empty log's own goes (app.css)
}

async function closeSession(id) {
	await rpc.call('session.close', { session_id: id });
	terminal.forget(id);
	await refresh();
	if (id === current) await pickAnother(id);
}

// On every new chat socket: list, then resume the current (or stored) session
// if it is still alive, else a detached one, else show that none is open.
function onReady(payload) {
	restarting = false;
	showNode(payload?.node);
	tray.setLimits(payload?.attachments);
	lineLimits = { prompt: payload?.max_prompt_bytes, command: payload?.max_command_bytes };
	loadModels();
	agentsLoaded = loadAgents();
	settings.load();
	serial(async () => {
		const before = sessions; // what the page listed before this socket
		await refresh();
		const want = current ?? localStorage.getItem(SESSION_KEY);
		const s = sessions.find((x) => x.session_id === want);
		// A reconnect follows the session this page shows, listed here or
		// not: on another node of a cluster it may still be its dead
		// node's (4010) until that node's lease lapses, and then this one
		// adopts it. The page waits for it rather than make a new one.
		if ((s && !isGone(s)) || (!s && current)) {
			try {
				await resume(want);
				clearMoving();
				return;
			} catch (err) {
				if (err instanceof RpcError && err.code === HELD_ELSEWHERE) {
					keepMoving(before);
					showMoving(want, err.data);
					return;
				}
				if (!(err instanceof RpcError) || err.code !== 4001) throw err;
			}
		}
		// The stored session is gone (another tab of this browser moved
		// on, or it closed): a detached one waits for a viewer, the most
		// recently active first, rather than a new session.
		const waiting = sessions
			.filter((x) => x.state === 'detached')
			.sort((a, b) => String(b.last_active).localeCompare(String(a.last_active)));
		for (const d of waiting) {
			try {
				await resume(d.session_id);
				return;
			} catch (err) {
				if (!(err instanceof RpcError) || err.code !== 4001) throw err;
			}
		}
		showNoSession();
	});
}

// The error of a session another node of the cluster still holds
// (docs/PROTOCOL.md, issue 41): data {node, retry_in_ms}.
const HELD_ELSEWHERE = 4010;
let movingTimer = 0;
let movingTick = 0;

/**
 * Says, in the chat pane, that session id's node stopped and another
 * takes it over within the lease's time left (data.retry_in_ms), counting
 * down, and resumes it then (again while the answer is 4010). The draft
 * in the input stays; the conversation shown stays until the resume
 * brings it back whole.
 */
function showMoving(id, data) {
	clearMoving();
	const wait = Math.max(1000, Number(data?.retry_in_ms) || 3000);
	const until = Date.now() + wait;
	const say = () => {
		const left = Math.max(0, Math.ceil((until - Date.now()) / 1000));
		els.moving.textContent = `The server holding this conversation stopped; another takes over within ${left} s.`;
	};
	say();
	els.moving.hidden = false;
	movingTick = setInterval(say, 1000);
	movingTimer = setTimeout(() => serial(() => followMoving(id)), wait + 300);
}

/**
 * Keeps in the session list, marked moving, the sessions the page listed
 * before its socket went that this node does not list (yet): while their
 * dead node's leases run, no node lists them, and the list would say
 * there are none. The next list once the moving session is back (this
 * node adopts them as it lists) replaces them.
 */
function keepMoving(before) {
	const listed = new Set(sessions.map((s) => s.session_id));
	const kept = before
		.filter((s) => !listed.has(s.session_id) && !isGone(s))
		.map((s) => ({ ...s, state: 'moving', running: false }));
	if (kept.length === 0) return;
	sessions = [...sessions, ...kept];
	renderLists();
}

function clearMoving() {
	clearInterval(movingTick);
	clearTimeout(movingTimer);
	els.moving.hidden = true;
}

/** Resumes the session showMoving waits for, unless the page moved on. */
async function followMoving(id) {
	if (current !== id || !rpc.ready) return; // another session, or the socket is down: onReady follows it
	try {
		await resume(id);
		clearMoving();
	} catch (err) {
		if (err instanceof RpcError && err.code === HELD_ELSEWHERE) {
			showMoving(id, err.data);
			return;
		}
		clearMoving();
		throw err;
	}
}

/** Shows the node this page's socket reached (gateway.ready's node). */
function showNode(node) {
	const meta = document.querySelector('.meta[title="node"]');
	if (meta && typeof node === 'string' && node) meta.textContent = node;
}

function onEvent(ev) {
	const sid = ev.session_id;
	const p = ev.payload ?? {};
	if (sid && sid === current && ev.type === 'approval.request') notifier.approval(p.command);
	if (sid && sid === current && ev.type === 'message.complete') notifier.replied(p.text, Boolean(p.interrupted));
	if (sid && sid !== current) {
		if (ev.type !== 'message.delta') refreshSoon();
		return;
	}
	switch (ev.type) {
		case 'message.delta':
			if (!streaming.has(p.turn_id)) {
				streaming.add(p.turn_id);
				updateBusy();
				refreshSoon(); // "running" changed
			}
			chat.delta(p.turn_id, p.text ?? '');
			setPending('writing…');
			break;
		case 'message.complete':
			streaming.delete(p.turn_id);
			streaming.delete(RESUMED_TURN);
			chat.complete(p.turn_id, p.text, Boolean(p.interrupted), p.status);
			updateBusy();
			refreshSoon();
			break;
		case 'approval.request':
			if (p.turn_id) streaming.add(p.turn_id); // Escape interrupts the turn
			setPending('waiting for your approval…');
			updateBusy();
			chat.entry({ kind: 'approval_request', text: p.command ?? '', turn_id: p.turn_id, data: { request_id: p.request_id, tool: p.tool, options: p.options } });
			break;
		case 'approval.resolved':
			chat.entry({ kind: 'approval_resolved', text: p.choice ?? '', live: true, data: { request_id: p.request_id, choice: p.choice, by: p.by } });
			if (!els.log.querySelector('[data-testid="approval-card"][data-state="pending"]')) setPending('waiting for the reply…');
			break;
		case 'tool.start':
			if (p.turn_id) streaming.add(p.turn_id);
			chat.entry({
				kind: 'tool_call',
				text: p.command ?? '',
				turn_id: p.turn_id,
				data: { tool_id: p.tool_id, name: p.name, kind: p.kind, status: p.status, locations: p.locations, content: p.content },
			});
			break;
		case 'tool.update':
			chat.toolUpdate(p);
			break;
		case 'message.thought':
			if (p.turn_id && !streaming.has(p.turn_id)) {
				streaming.add(p.turn_id);
				updateBusy();
			}
			chat.thought(p.turn_id, p.text ?? '');
			setPending('thinking…');
			break;
		case 'plan.update':
			setPlan(p.entries);
			break;
		case 'commands.update':
			setCommands(p.commands);
			break;
		case 'tool.complete':
			chat.entry({
				kind: 'tool_result',
				text: p.output ?? '',
				turn_id: p.turn_id,
				data: { tool_id: p.tool_id, exit_code: p.exit_code, truncated: p.truncated, duration_ms: p.duration_ms, status: p.status },
			});
			break;
		case 'session.closed':
			if (p.suspended) {
				// dashgate is restarting: the session comes back with it and
				// is resumed once the socket reconnects (onReady).
				streaming.clear();
				updateBusy();
				showRestarting();
				break;
			}
			if (sid === current && !currentGone) {
				currentGone = true;
				streaming.clear();
				execs = 0;
				updateBusy();
				chat.entry({ kind: 'notice', text: endNotice(p.end_reason) });
				chat.add('system', 'the next message starts a new session');
				terminal.stop('session closed');
			}
			refreshSoon();
			break;
		case 'history.entry':
			chat.live(p);
			break;
		case 'session.changed':
			refreshSoon();
			break;
		case 'worker.exited':
			chat.entry({ kind: 'notice', text: workerNotice(p) });
			refreshSoon();
			break;
		case 'notice':
			chat.entry({ kind: 'notice', text: p.text ?? '' });
			if (p.text === TERMINAL_REAP_NOTICE) terminal.ended('The terminal was ended by an administrator.');
			break;
		case 'error':
			chat.entry({ kind: 'error', code: p.code, text: p.message ?? 'error' });
			break;
		default:
			console.debug('dashgate: unhandled event', ev);
	}
}

function onStatus(status) {
	if (restarting && status !== 'connected') return; // keep saying why
	if (status !== 'connected' && current && busy()) cutWatch = current;
	els.status.textContent = connectionText(status);
	els.status.dataset.state = status;
	// A reply that was streaming is not "writing…" here while the socket
	// is down (dashgate may have died with it): the resume after the
	// reconnect says what runs.
	if (status !== 'connected' && busy()) setPending(connectionText(status) + '…');
	if (status === 'reconnecting') checkLoggedIn();
}

let loginCheck = null;

/**
 * Once per lost connection: when dashgate answers that this browser is no
 * longer logged in (Log out in another tab, the login expired), the page
 * reloads to its login page instead of reconnecting for ever. Asked of the
 * dashboard's own URL (200 logged in, 401 not); a dashgate that is away
 * answers nothing, and the reconnect goes on.
 */
function checkLoggedIn() {
	if (loginCheck) return;
	loginCheck = fetch(base, { cache: 'no-store' })
		.then((r) => {
			if (r.status === 401) location.replace(`${location.pathname}?logged_out=1`); // the login page says so
		})
		.catch(() => {})
		.finally(() => {
			loginCheck = null;
		});
}

function showRestarting() {
	restarting = true;
	cutWatch = null; // a stop says itself why the reply ended
	els.status.textContent = connectionText('restarting');
	els.status.dataset.state = 'restarting';
}

// The error of a node that cannot prove it still holds the session (the
// conversation store is unreachable): nothing was done, and the line is
// not kept (docs/PROTOCOL.md, 5006).
const NOTHING_DONE = 5006;

/**
 * Whether a failed slash.exec is kept in the session's history (as the
 * command and an error entry): yes when the command reached the session
 * (it ran and failed, or its worker could not start), no when the request
 * was refused before (bad params, unknown or closed session, this socket
 * views too many sessions, the socket went).
 */
function storedFailure(err) {
	if (!(err instanceof RpcError) || err.code == null) return false;
	if (err.code === 4001 || err.code === NOTHING_DONE || err.code === -32603 || (err.code >= -32700 && err.code <= -32600)) return false;
	if (err.code === 4029 && /^this socket views/.test(err.message)) return false;
	return true;
}

// files: the prompt's attachments ([{id, name, ...}]; a regenerate's);
// absent: the tray's.
async function submit(line, files) {
	const text = line.trim();
	if (!text) return;
	await queue; // a session change in progress decides where the line goes
	if (current === null || currentGone) {
		await serial(create);
		if (current === null || currentGone) return; // create failed and said so
	}
	const sid = current;
	const slash = text.startsWith('/');
	if (!slash && !files) await tray.settled(); // a file still uploading goes with this prompt
	const refs = slash ? [] : (files ?? tray.files());
	remember(line);
	// Shown at once; the server keeps it in the history once it ran.
	const mine = chat.entry(slash ? { kind: 'slash', text } : { kind: 'prompt', text: line, attachments: refs });
	const mark = execSeq;
	const stopsBefore = stops;
	execs++; // pending until the reply (a command) or its turn is known (a prompt)
	setPending(slash ? `running ${text.split(/\s/)[0]}…` : 'waiting for the reply…');
	updateBusy();
	const settle = () => {
		if (mark !== execSeq) return;
		execs = Math.max(0, execs - 1);
		updateBusy();
	};
	try {
		if (slash) {
			const r = await rpc.call('slash.exec', { session_id: sid, command: text });
			settle();
			if (sid === current) chat.entry({ kind: 'slash_output', text: r.output ?? '' });
		} else {
			const params = { session_id: sid, text: line };
			if (refs.length > 0) params.attachments = refs.map((f) => f.id);
			const r = await rpc.call('prompt.submit', params);
			if (!files) tray.sent(); // the prompt's now
			// The turn runs until its message.complete.
			if (sid === current && r?.turn_id && mark === execSeq) streaming.add(r.turn_id);
			settle();
		}
	} catch (err) {
		settle();
		if (sid !== current) return;
		if (slash && storedFailure(err)) {
			// As the history keeps it: the code and the message; the
			// stderr tail, which it does not keep, only behind the
			// entry's disclosure.
			// A command stopped with Stop or Escape reads as stopped, as
			// the history keeps it (interrupted), not as a failure.
			chat.entry({ kind: 'error', code: err.code, text: err.message, stderr_tail: stderrTail(err), interrupted: stops !== stopsBefore });
		} else {
			chat.demote(mine);
			chat.addError(err);
			// Nothing was done with it: the line goes back into the input,
			// to send again once the store is back (unless a new one is
			// being typed).
			if (err instanceof RpcError && err.code === NOTHING_DONE && sid === current && !els.input.value) setInput(line);
			return;
		}
	}
	if (slash) await reorderAfter(sid, mine, text);
}

/**
 * After a slash command, shows the entries from it on in the order the
 * history keeps them: its worker's exit (an event) and its reply may arrive
 * in either order.
 */
let reordering = 0; // reorderAfter calls in flight (window.dashgate.settled)
async function reorderAfter(sid, mine, command) {
	if (streaming.size > 0) return;
	reordering++;
	try {
		const r = await rpc.call('session.history', { session_id: sid, limit: 20 });
		if (sid !== current) return;
		const entries = Array.isArray(r.entries) ? r.entries : [];
		let i = entries.length - 1;
		while (i >= 0 && !(entries[i].kind === 'slash' && entries[i].text === command)) i--;
		if (i < 0) return;
		let j = i;
		while (j > 0 && entries[j - 1].kind === 'notice') j--; // a notice that came first
		chat.reconcile(mine.previousElementSibling?.dataset.kind === 'notice' && j < i ? mine.previousElementSibling : mine, entries.slice(j)) ||
			chat.reconcile(mine, entries.slice(i));
	} catch (err) {
		console.debug('dashgate: session.history after a slash command', err);
	} finally {
		reordering--;
	}
}

/** Whether a turn or a command of the current session is running. */
function busy() {
	return Boolean(current) && !currentGone && (streaming.size > 0 || execs > 0);
}

function setPending(text) {
	els.pendingText.textContent = text;
}

/**
 * Shows what runs: while a turn or a command of the current session runs,
 * the pending line and Stop show, and Send is disabled (the input stays
 * editable: the next line can be written meanwhile).
 */
function updateBusy() {
	const b = busy();
	els.pending.hidden = !b;
	els.stop.hidden = !b;
	els.send.disabled = b;
	els.form.dataset.busy = String(b);
	chat.setIdle(!b && Boolean(current) && !currentGone);
	if (!b && resumedNote) {
		resumedNote.remove();
		resumedNote = null;
	}
}

/**
 * The regenerate button of the last reply: its prompt again, as a new turn
 * (prompt.submit with the same text), as if it were sent from the input.
 */
function regenerate(prompt, files) {
	if (busy() || !prompt.trim()) return;
	if (!rpc.ready) {
		remember(prompt);
		setInput(prompt);
		chat.add('system', NOT_SENT);
		updateBusy();
		return;
	}
	submit(prompt, files ?? []);
}

/** Stops the running turn or command (session.interrupt). */
let stops = 0; // stop() calls: a command that fails after one was stopped
function stop() {
	if (!busy()) return;
	stops++;
	setPending('stopping…');
	rpc.call('session.interrupt', { session_id: current }).catch((err) => chat.addError(err));
}

// Sent lines, oldest first, for Up/Down in the input.
let sent = [];
try {
	const v = JSON.parse(localStorage.getItem(SENT_KEY) ?? '[]');
	if (Array.isArray(v)) sent = v.filter((x) => typeof x === 'string').slice(-SENT_MAX);
} catch {
	sent = [];
}
let sentPos = sent.length; // where Up/Down is in sent (sent.length: the draft)
let draft = '';

function remember(line) {
	if (sent[sent.length - 1] !== line) sent.push(line);
	if (sent.length > SENT_MAX) sent = sent.slice(-SENT_MAX);
	localStorage.setItem(SENT_KEY, JSON.stringify(sent));
	sentPos = sent.length;
	draft = '';
}

function setInput(text) {
	els.input.value = text;
	els.input.setSelectionRange(text.length, text.length);
	autosize();
	updateSlashList();
	saveDraft();
}

/** Keeps the input's text as the current session's draft until it is sent (setInput('')). */
function saveDraft() {
	if (!current) return;
	if (els.input.value) localStorage.setItem(DRAFT_PREFIX + current, els.input.value);
	else localStorage.removeItem(DRAFT_PREFIX + current);
}

// The longest prompt and command the server takes, in UTF-8 bytes
// (gateway.ready's max_prompt_bytes, max_command_bytes); unknown before it.
let lineLimits = {};
let lineRefused = false; // the tray's error says lineOver's refusal

/**
 * Says why line is too long to send, before it is sent ("" when it fits):
 * the server would refuse it (-32602) once the page had shown it as sent.
 * The line stays in the box.
 */
function lineOver(line) {
	const slash = line.trim().startsWith('/');
	const max = slash ? lineLimits.command : lineLimits.prompt;
	if (!max) return '';
	const n = new TextEncoder().encode(slash ? line.trim() : line).length;
	if (n <= max) return '';
	return `${slash ? 'A command' : 'A message'} may be at most ${formatBytes(max)}: this one is ${formatBytes(n)}.`;
}

function autosize() {
	const el = els.input;
	el.style.height = 'auto';
	el.style.height = `${el.scrollHeight + 2}px`;
}

els.form.addEventListener('submit', (ev) => {
	ev.preventDefault();
	if (busy()) return;
	const line = els.input.value;
	if (!line.trim()) {
		if (tray.files().length > 0) tray.error('Type a message to send with the files.');
		return;
	}
	const tooLong = lineOver(line);
	if (tooLong || lineRefused) tray.error(tooLong); // said, or taken back once it fits
	lineRefused = tooLong !== '';
	if (tooLong) return;
	const over = line.trim().startsWith('/') ? '' : tray.check();
	if (over) {
		tray.error(over); // said before sending, in the server's words (error 4013)
		return;
	}
	if (!rpc.ready) {
		// Not sent: kept in the box and in the Up history, sent when Send
		// is pressed again once connected (never by itself).
		remember(line);
		setInput(line);
		chat.add('system', NOT_SENT);
		return;
	}
	setInput('');
	submit(line);
});

els.input.addEventListener('input', autosize);
els.input.addEventListener('input', saveDraft);

// Enter sends, Shift+Enter is a new line; Up on the first line and Down on
// the last go through the lines sent before; Escape stops what runs.
els.input.addEventListener('keydown', (ev) => {
	if (ev.isComposing) return;
	const el = els.input;
	switch (ev.key) {
		case 'Enter':
			if (ev.shiftKey || ev.altKey) return;
			ev.preventDefault();
			els.form.requestSubmit();
			return;
		case 'Escape':
			if (!busy()) return;
			ev.preventDefault();
			stop();
			return;
		case 'ArrowUp':
			if (ev.shiftKey || el.value.lastIndexOf('\n', el.selectionStart - 1) !== -1 || sentPos === 0) return;
			ev.preventDefault();
			if (sentPos === sent.length) draft = el.value;
			setInput(sent[--sentPos]);
			return;
		case 'ArrowDown':
			if (ev.shiftKey || el.value.indexOf('\n', el.selectionEnd) !== -1 || sentPos >= sent.length) return;
			ev.preventDefault();
			sentPos++;
			setInput(sentPos === sent.length ? draft : sent[sentPos]);
			return;
	}
});

// A keypress of Enter after its keydown was taken (a real browser sends
// none; synthetic key events may) must not put a newline into the input.
els.input.addEventListener('keypress', (ev) => {
	if (ev.key === 'Enter' && !ev.shiftKey && !ev.altKey) ev.preventDefault();
});

els.stop.addEventListener('click', () => {
	stop();
	els.input.focus();
});

// Approve / Deny on an approval card: approval.respond. The card changes
// with the approval.resolved event every viewer gets; {resolved: false}
// means another tab (or a timeout, an interrupt) answered first.
els.log.addEventListener('click', (ev) => {
	const button = ev.target instanceof Element ? ev.target.closest('.card-actions button[data-choice]') : null;
	const card = button?.closest('[data-testid="approval-card"]');
	if (!card || button.disabled || card.dataset.state !== 'pending') return;
	respond(card.dataset.requestId, button.dataset.choice);
});

async function respond(requestId, choice) {
	const sid = current;
	if (!sid) return;
	chat.responding(requestId, choice);
	chat.busy(requestId, true);
	try {
		const r = await rpc.call('approval.respond', { session_id: sid, request_id: requestId, choice });
		if (sid === current) chat.responded(requestId, Boolean(r.resolved));
	} catch (err) {
		if (sid !== current) return;
		chat.busy(requestId, false);
		chat.addError(err, 'approval');
	}
}

// The model picker: model.list once per chat socket; a choice is the
// current session's model (session.configure).
async function loadModels() {
	try {
		const r = await rpc.call('model.list', {});
		models = { models: Array.isArray(r.models) ? r.models.filter((m) => typeof m === 'string') : [], default: r.default ?? '' };
		modelsError = '';
	} catch (err) {
		models = null;
		modelsError = err.message || 'model.list failed';
	}
	renderModels();
}

function setModel(model) {
	currentModel = model;
	renderModels();
}

function renderModels() {
	const sel = els.modelPicker;
	const list = models?.models ?? [];
	const def = models?.default ?? '';
	const echo = models !== null && list.length === 0 && !def; // no model server: the echo worker
	const opt = (value, label) => {
		const o = document.createElement('option');
		o.value = value;
		o.textContent = label;
		return o;
	};
	const options = [];
	if (echo) {
		options.push(opt('', 'echo agent'));
	} else {
		options.push(opt('', def ? `default (${def})` : 'default model'));
		for (const m of list) if (m !== def) options.push(opt(m, m)); // the default is listed once, as the default
		if (currentModel && !list.includes(currentModel)) options.push(opt(currentModel, currentModel));
	}
	sel.replaceChildren(...options);
	sel.value = echo ? '' : currentModel;
	// Nothing to choose from: no list (yet, or it failed), or only the echo worker.
	sel.disabled = echo || list.length === 0 || !current || !!currentAgent;
	// An ACP agent's session: the agent chooses its model; the header names the agent.
	sel.hidden = !!currentAgent;
	els.chatModel.hidden = !!currentAgent;
	sel.title = modelsError ? `model list unavailable: ${modelsError}` : echo ? 'no model server: the echo agent answers' : 'the model of this session';
	els.chatModel.textContent = echo ? 'echo agent' : currentModel || def || 'default model';
	els.input.placeholder = currentAgent
		? `Ask ${currentAgent} (type / for its commands)`
		: models !== null && !echo
			? `Ask ${currentModel || def || 'the model'} (or /help)`
			: 'Type /help, or a prompt';
	els.chatModel.dataset.model = echo ? '' : currentModel;
}

els.modelPicker.addEventListener('change', () => {
	const sid = current;
	const model = els.modelPicker.value;
	if (!sid) return;
	serial(async () => {
		if (sid !== current) return;
		try {
			const r = await rpc.call('session.configure', { session_id: sid, model });
			if (sid === current) setModel(typeof r.model === 'string' ? r.model : model);
		} catch (err) {
			renderModels(); // back to the model in use
			throw err;
		}
	});
});

// The agent picker: agent.list once per chat socket. With more than one
// agent a new session talks to the one picked (remembered in
// localStorage; at first the default one); with one, the picker stays
// hidden and session.create names none, as before agents.
async function loadAgents() {
	try {
		const r = await rpc.call('agent.list', {});
		agents = Array.isArray(r.agents) ? r.agents.filter((a) => a && typeof a.name === 'string' && a.name) : [];
	} catch (err) {
		console.warn('dashgate: agent.list', err);
		agents = null;
	}
	renderAgents();
}

function renderAgents() {
	const sel = els.agentPicker;
	const list = agents ?? [];
	sel.hidden = list.length < 2;
	if (sel.hidden) {
		sel.replaceChildren();
		return;
	}
	sel.replaceChildren(
		...list.map((a) => {
			const o = document.createElement('option');
			o.value = a.name;
			// The built-in worker's name says nothing to a newcomer: say what it is.
			o.textContent = a.kind === 'builtin' ? `${a.name} (built-in)` : a.name;
			o.title = a.kind === 'builtin' ? "dashgate's own agent" : `an Agent Client Protocol agent (${a.name})`;
			o.dataset.kind = a.kind ?? '';
			return o;
		}),
	);
	const stored = list.some((a) => a.name === preferredAgent) ? preferredAgent : localStorage.getItem(AGENT_KEY);
	const def = list.find((a) => a.default) ?? list[0];
	sel.value = list.some((a) => a.name === stored) ? stored : def.name;
}

let preferredAgent = ''; // the user's default agent (settings), where the picker starts

/** Starts the agent picker at the user's default agent (settings.js; "" none). */
function preferAgent(name) {
	preferredAgent = name;
	if (name && !els.agentPicker.hidden && agents?.some((a) => a.name === name)) els.agentPicker.value = name;
}

/** The agent a new session gets: the picker's, or "" (the server's default) when there is none to pick. */
function pickedAgent() {
	return els.agentPicker.hidden ? '' : els.agentPicker.value;
}

els.agentPicker.addEventListener('change', () => localStorage.setItem(AGENT_KEY, els.agentPicker.value));

/** Shows the current session's ACP agent in the chat header ("" the built-in worker: nothing). */
function setAgent(agent) {
	if (agent === currentAgent && els.chatAgent.hidden === !agent) return;
	currentAgent = agent;
	els.chatAgent.textContent = agent;
	els.chatAgent.hidden = !agent;
	renderModels();
}

/** Shows the agent's plan (plan.update entries, whole each time); null or none hides it. */
function setPlan(entries) {
	const list = Array.isArray(entries) ? entries : [];
	renderPlan(els.planList, list);
	els.plan.hidden = list.length === 0;
}

/** Keeps the slash commands the current session's agent offers (commands.update). */
function setCommands(list) {
	commands = Array.isArray(list) ? list.filter((c) => c && typeof c.name === 'string' && c.name) : [];
	updateSlashList();
}

// The agent's commands matching what is typed, shown while the input is
// a "/" and a command's first letters; a click (or Tab) puts the command
// in the input.
function updateSlashList() {
	const matches = slashMatches(commands, els.input.value);
	renderCommands(els.slashList, matches);
	els.slashList.hidden = matches.length === 0;
}

function pickCommand(name) {
	setInput(`/${name} `);
	els.input.focus();
	updateSlashList();
}

els.slashList.addEventListener('mousedown', (ev) => ev.preventDefault()); // the input keeps the focus
els.slashList.addEventListener('click', (ev) => {
	const li = ev.target instanceof Element ? ev.target.closest('[data-testid="slash-command"]') : null;
	if (li) pickCommand(li.dataset.name);
});
els.input.addEventListener('input', updateSlashList);
els.input.addEventListener('keydown', (ev) => {
	if (ev.key !== 'Tab' || ev.shiftKey || els.slashList.hidden) return;
	const first = els.slashList.querySelector('[data-testid="slash-command"]');
	if (!first) return;
	ev.preventDefault();
	pickCommand(first.dataset.name);
});

els.newSession.addEventListener('click', () => serial(create));
// "new messages" takes the reader to the end (layout.js); it hides there.
els.jumpNew.addEventListener('click', () => els.input.focus());
els.historyMore.addEventListener('click', () => serial(loadEarlier));
els.closedMore.addEventListener('click', () => serial(loadMoreClosed));

els.closedList.addEventListener('click', (ev) => {
	const li = ev.target.closest('[data-testid="closed-session"]');
	if (!li) return;
	const id = li.dataset.sessionId;
	const button = ev.target.closest('button');
	if (button?.dataset.testid === 'delete') {
		serial(() => deleteSession(id));
	} else if (button?.dataset.testid === 'reopen' || !button) {
		serial(() => reopen(id));
	}
});

// Search: session.search as the user types (debounced); a hit opens its session.
let searchTimer = 0;
let searchSeq = 0;
async function search() {
	const query = els.search.value.trim();
	const n = ++searchSeq;
	if (!query) {
		renderHits(els.hits, null);
		return;
	}
	if (!rpc.ready) return;
	const r = await rpc.call('session.search', { query, limit: 20 });
	if (n === searchSeq) renderHits(els.hits, Array.isArray(r.hits) ? r.hits : [], query);
}
function searchSoon(delay) {
	clearTimeout(searchTimer);
	searchTimer = setTimeout(() => search().catch((err) => chat.addError(err, 'search')), delay);
}
els.search.addEventListener('input', () => searchSoon(SEARCH_DELAY_MS));
els.search.addEventListener('keydown', (ev) => {
	if (ev.key === 'Enter') {
		ev.preventDefault();
		searchSoon(0);
	} else if (ev.key === 'Escape') {
		els.search.value = '';
		searchSoon(0);
	}
});
function openHitOf(ev) {
	const li = ev.target.closest('[data-testid="search-hit"]');
	if (!li) return;
	const id = li.dataset.sessionId;
	const seq = Number(li.dataset.seq);
	serial(() => jumpToHit(id, seq));
}
els.hits.addEventListener('click', openHitOf);
els.hits.addEventListener('keydown', (ev) => {
	if (ev.key === 'Enter') openHitOf(ev);
});

// Rename in place: the Rename button, or a double-click on a title, puts
// an input in the title's place; Enter saves (session.rename), Escape or
// leaving it cancels. Every tab's list follows (session.changed).
function startRename(li) {
	const id = li.dataset.sessionId;
	const title = li.querySelector('[data-testid="session-title"]');
	const s = sessions.find((x) => x.session_id === id);
	if (!title || !s || isGone(s)) return;
	if (renaming) endRename(false);
	const input = document.createElement('input');
	input.type = 'text';
	input.className = 'session-rename-input';
	input.dataset.testid = 'rename-input';
	input.maxLength = 200;
	input.value = s.title ?? '';
	input.setAttribute('aria-label', `New title for ${s.title || id}`);
	title.replaceWith(input);
	renaming = { id, input };
	input.focus();
	input.select();
	input.addEventListener('keydown', (ev) => {
		if (ev.isComposing) return;
		if (ev.key === 'Enter') {
			ev.preventDefault();
			saveRename();
		} else if (ev.key === 'Escape') {
			ev.preventDefault();
			endRename(true);
		}
	});
	input.addEventListener('blur', () => {
		if (renaming?.input === input && !renaming.saving) endRename(false);
	});
}

/** Ends the edit; focus: give the keyboard back to the row's Rename button. */
function endRename(focus) {
	const r = renaming;
	if (!r) return;
	renaming = null;
	renderedLive = ''; // the title comes back
	renderLists();
	if (focus) els.list.querySelector(`[data-testid="session-item"][data-session-id="${CSS.escape(r.id)}"] [data-testid="session-rename"]`)?.focus();
}

async function saveRename() {
	const r = renaming;
	const title = r.input.value.trim();
	const s = sessions.find((x) => x.session_id === r.id);
	if (!title || title === s?.title) {
		endRename(true);
		return;
	}
	r.saving = true;
	r.input.disabled = true;
	try {
		const res = await rpc.call('session.rename', { session_id: r.id, title });
		resumeErrors.delete(r.id);
		if (s) s.title = typeof res.title === 'string' ? res.title : title;
	} catch (err) {
		resumeErrors.set(r.id, `Could not rename: ${err instanceof RpcError ? errorSentence(err.code, err.message) : err.message}`);
	}
	if (renaming === r) endRename(true);
	refreshSoon();
}

els.list.addEventListener('dblclick', (ev) => {
	const li = ev.target.closest('[data-testid="session-item"]');
	if (li && ev.target.closest('[data-testid="session-title"]')) startRename(li);
});

els.list.addEventListener('click', (ev) => {
	const li = ev.target.closest('[data-testid="session-item"]');
	if (!li || ev.target.closest('input')) return;
	const id = li.dataset.sessionId;
	const button = ev.target.closest('button');
	if (button?.disabled) return;
	if (button?.dataset.testid === 'session-rename') {
		startRename(li);
	} else if (button?.dataset.testid === 'session-close') {
		serial(() => closeSession(id));
	} else if (button?.dataset.testid === 'session-resume' || (!button && id !== current && !li.classList.contains('closed'))) {
		serial(() => resumeClicked(id));
	}
});

// Keyboard shortcuts (shortcuts.js): the session list's order is the
// order of previous / next.
initShortcuts(
	{
		newSession: () => serial(create),
		previousSession: () => moveSession(-1),
		nextSession: () => moveSession(1),
		focusChat: () => {
			layout.show('chat');
			els.input.focus();
		},
		focusTerminal: () => {
			layout.show('terminal');
			terminal.term.focus();
		},
		searchTerminal: () => {
			layout.show('terminal');
			terminal.openSearch();
		},
	},
	byTestId('shortcuts-dialog'),
	byTestId('shortcuts-open'),
);

function moveSession(step) {
	const ids = [...els.list.querySelectorAll('[data-testid="session-item"]:not(.closed)')].map((li) => li.dataset.sessionId);
	if (ids.length < 2) return;
	const at = ids.indexOf(current);
	const id = ids[(at + step + ids.length) % ids.length];
	if (id && id !== current) serial(() => resumeClicked(id));
}

window.dashgate = {
	// The terminal shown (its tab's), as are terminalText and ptySocketState.
	get term() {
		return terminal.term;
	},
	terminalTabs: () => terminal.tabs(),
	currentSession: () => current,
	settled: () => reordering === 0,
	call: (method, params) => rpc.call(method, params),
	entries: () => [...els.log.querySelectorAll('[data-testid="entry"]')].map((e) => ({ kind: e.dataset.kind, text: e.textContent })),
	terminalText: () => terminal.text(),
	chatSocketState: () => rpc.state(),
	currentModel: () => currentModel,
	currentAgent: () => currentAgent,
	settings: () => settings.current(),
	ptySocketState: () => terminal.state(),
	notifications: () => notifier.shown(),
};

rpc.start();
