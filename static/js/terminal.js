// The terminal pane: xterm.js bound to GET /ws/pty (PROTOCOL.md §3).
//
// One TerminalPane shows one terminal of a session at a time: the session's
// first (id "1"), or another of its terminals (issue 42: /ws/pty?terminal=ID;
// terminal_tabs.js keeps a pane per tab). attach(id) closes the previous
// socket (code 1000), clears the screen and connects to that terminal of
// the new session with keepalive=1. The server's hello carries a
// resume_token that is kept in localStorage under
// "dashgate.pty.<session_id>" (the first terminal's) or
// "dashgate.pty.<session_id>.<terminal id>" as {resume_token, offset}; the
// next connection for that terminal sends it back so the server reattaches
// the parked program instead of starting a new one.
//
// The offset sent with the token is the number of bytes of that session's
// output this page's xterm actually holds (PROTOCOL.md: "the number of output
// bytes the client already has"): after a reconnect within the page that is
// the running count, so only the missing bytes are replayed; after a page
// reload or a switch back from another session the screen is empty, so it is
// 0 and the server replays its whole buffer, redrawing the screen. The stored
// offset records how far this browser got and is kept current (throttled, and
// on pagehide) for diagnostics and other clients.
//
// A status line above the terminal (data-testid="terminal-status", its
// data-state "starting" | "error" | "disconnected" | "ended") says what the
// screen cannot: "starting the terminal…" until its first byte arrives (a
// shell with a slow rc file), why it could not start ("disconnected,
// retrying" when dashgate itself does not answer), or that it ended
// ("terminal ended by an administrator", its exit code) with a "Start a new
// terminal" button (data-testid="terminal-restart"). A new terminal
// started after one ended keeps the old one's scrollback above a separator.
// That line, the line saying the terminal is shared and the one saying it
// is recorded are the page's, one each: a pane writes them while it is the
// one shown (setActive), and keeps what they would say otherwise.
//
// A replay only redraws. The output the server had before this socket
// attached (hello's replay_end) holds the queries the programs of the time
// asked (device attributes, colours, DECRQM, the cursor position): xterm.js
// answers them as it parses, and those answers, sent, would be typed into
// whatever reads the terminal now (the shell's prompt). So the answers
// xterm.js gives while it parses replayed bytes are dropped; what the user
// types meanwhile, and the answers to live output, are sent.
//
// On a phone (or any touch screen) a row of keys above the terminal
// (data-testid="term-keys", app.css, wired by terminal_tabs.js) gives what
// its keyboard lacks: Esc, Tab, the arrows and a sticky Ctrl that makes
// the next key, from the row or the keyboard, its control character (c:
// \x03; ui.takeCtrl says whether it is pressed). typeKey sends what
// xterm.js sends for a key: an arrow \x1b[A.. or, in application cursor
// mode (DECCKM, set by full-screen programs), \x1bOA..; with Ctrl,
// \x1b[1;5A... The bytes go through term.input, the path of a typed key.

import { Backoff, socketState, wsURL } from './net.js';
import { DISCONNECTED } from './notices.js';

// #refusal's answer for a session this server does not serve (404).
const MISSING = Symbol('missing');

export const PTY_STORAGE_PREFIX = 'dashgate.pty.';
// The id of a session's first terminal: the one /ws/pty attaches without
// ?terminal= (sessions.DefaultTerminal).
export const FIRST_TERMINAL = '1';
const CLOSE_NORMAL = 1000;
const CLOSE_TAKEN_OVER = 4409;
const SAVE_EVERY_MS = 1000;
// A token the server keeps refusing (its parked program expired, or the
// server restarted) is dropped after this many consecutive attempts that got
// no hello, about 25 s with the backoff; then a new terminal is started.
// Fewer would throw away a parked shell over a short outage.
const TOKEN_MAX_FAILURES = 8;

// Keys typed while a terminal socket connects are kept up to this many
// bytes and sent after its hello (more is dropped: a paste into a terminal
// that is not there yet).
const EARLY_MAX = 4096;

// The terminal's font unless the user's settings name one (setFont).
const FONT_FAMILY = 'ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, "Liberation Mono", monospace';
const FONT_SIZE = 13;

// The key row's keys: their bytes, or for an arrow its final letter.
const ROW_KEYS = { esc: '\x1b', tab: '\t' };
const ARROWS = { up: 'A', down: 'B', right: 'C', left: 'D' };

const DIM = '\x1b[2m';
const PLAIN = '\x1b[0m';

export class TerminalPane {
	/** @type {Terminal} the xterm.js instance */
	term;
	#fit;
	#search; // xterm's SearchAddon
	#base;
	#sessionId = null;
	#ws = null;
	#backoff = new Backoff();
	#retryTimer = 0;
	#saveTimer = 0;
	#pos = 0; // stream offset of the next byte this xterm will receive
	#skip = 0; // replayed bytes already on screen, to drop
	#replayEnd = 0; // stream offset where this socket's replay ends and live output begins
	#quiet = 0; // replayed chunks xterm.js is parsing now (0 or 1): its answers are not sent
	#halted = null; // 'exit' | 'takeover' | 'stopped' once reconnecting stops
	#tokenFailures = 0;
	#sentSize = { cols: 0, rows: 0 };
	#encoder = new TextEncoder();
	#ui; // the page's lines (status, shared, recorded) and hooks, see the constructor
	#el; // the element xterm.js opened into
	#terminalId; // which of the session's terminals (FIRST_TERMINAL: /ws/pty without ?terminal=)
	#active = true; // this pane is the one shown: it writes the page's lines
	#view = { status: null, shared: 0, recorded: false }; // what the page's lines say of this terminal
	#off = []; // removes the listeners it added to the window and the document (dispose)
	#endNote = ''; // why the terminal ended, when the chat said (an admin's reap)
	#keep = false; // the next program starts below the old scrollback
	#keepOnReset = false; // this socket's hello started a new program below the old output: its reset clears nothing
	#early = []; // keys typed while the socket connects (or that take the terminal back): sent after its hello
	#earlyBytes = 0;
	#exclusive = false; // the next socket takes the terminal over instead of sharing it (share=1)

	/**
	 * @param {HTMLElement} el the element xterm.js opens into
	 * @param {string} base the base path, starting and ending with "/"
	 * @param {{page: string, terminal?: string, status: HTMLElement, text: HTMLElement, restart: HTMLButtonElement, shared?: HTMLElement, sharedText?: HTMLElement, recorded?: HTMLElement, start?: () => void, takeCtrl?: () => boolean}} ui the page's id (?page=), which terminal of the session (FIRST_TERMINAL when absent), the status line (its button's clicks are the page's: restart), the line that says the terminal is shared, the one that says it is recorded, what starts a session when none is open (the status line's button then), and whether the key row's Ctrl is pressed (taking it)
	 */
	constructor(el, base, ui) {
		this.#base = base;
		this.#ui = ui;
		this.#el = el;
		this.#terminalId = ui.terminal || FIRST_TERMINAL;
		installCspShims();
		this.term = new Terminal({
			cursorBlink: true,
			convertEol: false,
			scrollback: 5000,
			fontFamily: FONT_FAMILY,
			fontSize: FONT_SIZE,
			// The page's theme (static/js/theme.js), dark without it.
			theme: window.dashgateTheme?.xterm() ?? { background: '#0f1115', foreground: '#d7dae0', cursor: '#5aa9ff', selectionBackground: '#2d5a8a' },
		});
		this.#fit = new FitAddon.FitAddon();
		this.term.loadAddon(this.#fit);
		// Links (http and https only) open in a new tab, without this page
		// as its opener; search finds text in the scrollback.
		this.term.loadAddon(new WebLinksAddon.WebLinksAddon((_ev, uri) => openLink(uri)));
		this.#search = new SearchAddon.SearchAddon();
		this.term.loadAddon(this.#search);
		this.term.open(el);
		this.#listen(document, 'dashgate:theme', () => {
			if (window.dashgateTheme) this.term.options.theme = window.dashgateTheme.xterm();
		});
		this.#fitNow();

		this.term.onData((s) => {
			if (this.#answeringReplay()) return;
			if (ui.takeCtrl?.()) s = control1(s);
			this.#input(this.#encoder.encode(s));
		});
		this.term.onBinary((s) => {
			if (!this.#answeringReplay()) this.#input(Uint8Array.from(s, (c) => c.charCodeAt(0) & 0xff));
		});
		this.term.onResize(() => this.#sendSize());

		let frame = 0;
		const refit = () => {
			if (frame) return;
			frame = requestAnimationFrame(() => {
				frame = 0;
				this.#fitNow();
			});
		};
		this.#listen(window, 'resize', refit);
		const observer = new ResizeObserver(refit);
		observer.observe(el);
		this.#off.push(() => observer.disconnect());
		// pagehide fires on reload, close and navigation (unlike beforeunload it
		// does not keep the page out of the back/forward cache); a hidden tab
		// may be discarded without either, so save then too.
		this.#listen(window, 'pagehide', () => this.#save());
		this.#listen(document, 'visibilitychange', () => {
			if (document.visibilityState === 'hidden') this.#save();
		});
	}

	/** Adds a listener that dispose removes. */
	#listen(target, type, fn) {
		target.addEventListener(type, fn);
		this.#off.push(() => target.removeEventListener(type, fn));
	}

	/**
	 * Types a key of the key row (data-key: esc, tab, up, down, left,
	 * right), with Ctrl when ctrl: its bytes go through term.input, as a
	 * typed key's.
	 */
	typeKey(key, ctrl) {
		const arrow = ARROWS[key];
		let bytes = ROW_KEYS[key];
		if (arrow) bytes = ctrl ? `\x1b[1;5${arrow}` : (this.term.modes.applicationCursorKeysMode ? '\x1bO' : '\x1b[') + arrow;
		if (bytes) this.term.input(bytes, true);
	}

	get sessionId() {
		return this.#sessionId;
	}

	/** Which of its session's terminals this pane shows (FIRST_TERMINAL: the first). */
	get terminalId() {
		return this.#terminalId;
	}

	/**
	 * Finds query in the scrollback (xterm's search addon): the next match,
	 * the previous with back, from the current one when incremental (as
	 * one types). It reports whether there is one; "" clears the selection.
	 */
	find(query, back = false, incremental = false) {
		if (!query) {
			this.term.clearSelection();
			return false;
		}
		return back ? this.#search.findPrevious(query) : this.#search.findNext(query, { incremental });
	}

	/**
	 * Makes this pane the one shown (on) or a hidden one (off): the shown
	 * one writes the page's status, shared and recorded lines and is
	 * fitted; a hidden one keeps its socket and its output.
	 */
	setActive(on) {
		this.#active = on;
		this.#el.dataset.active = on ? 'true' : 'false';
		if (!on) return;
		this.#render();
		this.refit();
	}

	/**
	 * Ends the pane: its socket closes (the terminal parks, or ends when it
	 * was not kept alive), nothing reconnects, its listeners go and its
	 * element is removed. forget drops its stored resume token (the
	 * terminal is being closed), else it is saved for a later page.
	 */
	dispose(forget = false) {
		if (forget) this.#forget();
		else this.#save();
		this.#disconnect();
		this.#halted = 'stopped';
		clearTimeout(this.#saveTimer);
		for (const off of this.#off) off();
		this.#off = [];
		this.term.dispose();
		this.#el.remove();
	}

	/**
	 * Sets the terminal's font (the user's settings, issue 42): size in CSS
	 * pixels, 8 to 32 (anything else: the default, 13), family a CSS
	 * font-family list ("": the default list). The terminal is fitted to
	 * its new cells, and the program in it told its new size.
	 */
	setFont(size, family) {
		const fontSize = Number.isInteger(size) && size >= 8 && size <= 32 ? size : FONT_SIZE;
		const fontFamily = family || FONT_FAMILY;
		if (this.term.options.fontSize === fontSize && this.term.options.fontFamily === fontFamily) return;
		this.term.options.fontSize = fontSize;
		this.term.options.fontFamily = fontFamily;
		this.refit();
	}

	/** Fits the terminal to its element (after a layout change). */
	refit() {
		requestAnimationFrame(() => this.#fitNow());
	}

	/**
	 * Says why the terminal ended (the chat's notice, e.g. "terminal ended
	 * by an administrator"); shown once it has ended, or at once if it has.
	 */
	ended(note) {
		this.#endNote = note;
		if (this.#halted === 'exit') this.#status('ended', note, 'Start a new terminal');
	}

	/** Starts a new terminal (or takes this one back) after it ended, below the old scrollback. */
	restart() {
		if (!this.#sessionId) {
			this.#ui.start?.(); // no session: the page starts one, which attaches here
			return;
		}
		if (this.#ws || this.#halted === 'stopped') return;
		if (this.#halted === 'takeover') this.#exclusive = true;
		this.#halted = null;
		this.#backoff.reset();
		this.#connect();
		this.term.focus();
	}

	#status(state, text, button) {
		this.#view.status = state ? { state, text, button } : null;
		this.#render();
	}

	/** Writes the page's lines from this pane's view, when it is the one shown. */
	#render() {
		if (!this.#active) return;
		const { status, text: t, restart, shared, sharedText, recorded } = this.#ui;
		const st = this.#view.status;
		status.hidden = !st;
		if (st) {
			status.dataset.state = st.state;
			t.textContent = st.text;
			restart.hidden = !st.button;
			if (st.button) restart.textContent = st.button;
		} else {
			delete status.dataset.state;
		}
		const others = this.#view.shared - 1;
		if (shared) shared.hidden = others < 1;
		if (sharedText && others >= 1) {
			sharedText.textContent = others === 1 ? 'Shared with 1 other tab' : `Shared with ${others} other tabs`;
		}
		if (recorded) recorded.hidden = !this.#view.recorded;
	}

	/**
	 * Takes the shared terminal over: the other tabs' sockets are closed
	 * (4409) and they offer to take it back; its size is this tab's.
	 */
	takeOver() {
		if (!this.#sessionId || !this.#ws || this.#halted) return;
		this.#save();
		this.#disconnect();
		this.#exclusive = true;
		this.#connect();
		this.term.focus();
	}

	/** Says how many sockets share the terminal (1: this one alone; 0: none open). */
	#shared(count) {
		this.#view.shared = count;
		this.#render();
	}

	/** State of the terminal socket: "connecting" | "open" | "closing" | "closed". */
	state() {
		return socketState(this.#ws);
	}

	/**
	 * Shows the terminal of a session, connecting to it. Calling it again for
	 * the session already shown does nothing (its socket reconnects by itself)
	 * unless retake is set and the terminal stopped (taken over elsewhere,
	 * exited): then it is attached afresh, taking it back from another tab.
	 */
	attach(sessionId, retake = false) {
		if (sessionId && sessionId === this.#sessionId && !(retake && this.#halted)) return;
		this.#save();
		this.#disconnect();
		this.#sessionId = sessionId;
		this.#backoff.reset();
		this.#tokenFailures = 0;
		this.#halted = null;
		this.term.reset();
		this.#pos = 0;
		this.#endNote = '';
		this.#keep = false;
		this.#early = [];
		this.#earlyBytes = 0;
		this.#status(null);
		if (sessionId) this.#connect();
		else this.#status('idle', 'No session is open; its terminal starts with it.', 'Start a session');
	}

	/**
	 * Disconnects for good (the session is gone): the screen stays as it is,
	 * nothing reconnects and key presses are ignored until the next attach.
	 */
	stop(note) {
		this.#save();
		this.#disconnect();
		this.#halted = 'stopped';
		if (note) this.term.write(`\r\n${DIM}[${note}]${PLAIN}\r\n`);
		this.#status(note ? 'ended' : null, note ?? '');
	}

	/**
	 * Returns the whole buffer (scrollback and screen) as text: one line per
	 * logical line (wrapped rows joined), trailing spaces trimmed, trailing
	 * empty lines dropped.
	 */
	text() {
		const buf = this.term.buffer.active;
		const lines = [];
		for (let i = 0; i < buf.length; i++) {
			const line = buf.getLine(i);
			if (!line) continue;
			const s = line.translateToString(true);
			if (line.isWrapped && lines.length > 0) lines[lines.length - 1] += s;
			else lines.push(s);
		}
		const out = lines.map((l) => l.replace(/\s+$/, ''));
		while (out.length > 0 && out[out.length - 1] === '') out.pop();
		return out.join('\n');
	}

	#connect() {
		this.#retryTimer = 0;
		const sid = this.#sessionId;
		this.#fitNow();
		const { cols, rows } = this.term;
		const q = new URLSearchParams({ session_id: sid, cols: String(cols), rows: String(rows), keepalive: '1' });
		if (this.#ui.page) q.set('page', this.#ui.page);
		if (this.#terminalId !== FIRST_TERMINAL) q.set('terminal', this.#terminalId);
		// Every tab of the session shares its terminal unless it asked to
		// take it over (docs/PROTOCOL.md: share=1).
		if (!this.#exclusive) q.set('share', '1');
		this.#exclusive = false;
		this.#shared(0);
		const stored = loadStored(this.#key(sid));
		const resuming = Boolean(stored?.resume_token);
		if (resuming) {
			q.set('resume_token', stored.resume_token);
			q.set('offset', String(this.#pos));
		} else if (this.#pos > 0) {
			// A new program, below what the old one left (soft reset:
			// modes back to normal, scrollback kept).
			this.term.write(`\x1b[!p\r\n${DIM}── new terminal ──${PLAIN}\r\n`);
			this.#pos = 0;
		}
		this.#endNote = '';
		this.#keepOnReset = false;
		let started = false; // its first byte arrived
		this.#status('starting', resuming ? 'reconnecting to the terminal…' : 'starting the terminal…');
		this.#skip = 0;
		this.#replayEnd = 0;
		this.#sentSize = { cols, rows };

		const ws = new WebSocket(wsURL(this.#base, 'ws/pty?' + q.toString()));
		ws.binaryType = 'arraybuffer';
		this.#ws = ws;
		let hello = false;

		ws.addEventListener('message', (ev) => {
			if (this.#ws !== ws) return;
			if (typeof ev.data === 'string') {
				const msg = parseControl(ev.data);
				if (msg?.type === 'hello') hello = true;
				this.#control(msg, resuming);
				if (msg?.type === 'hello') this.#sendEarly(ws);
			} else {
				if (!started) {
					started = true;
					this.#status(null);
				}
				this.#output(ev.data);
			}
		});
		ws.addEventListener('close', (ev) => {
			if (this.#ws !== ws) return;
			this.#ws = null;
			this.#save();
			this.#shared(0);
			if (ev.code === CLOSE_TAKEN_OVER) {
				this.#halted = 'takeover';
				this.term.write(`\r\n${DIM}[terminal taken over elsewhere]${PLAIN}\r\n`);
				this.#status('ended', 'Another tab took this terminal over.', 'Take it back');
				return;
			}
			if (this.#halted === 'exit') {
				this.term.write(`${DIM}[press a key to start a new terminal]${PLAIN}\r\n`);
				return;
			}
			if (hello && ev.code === CLOSE_NORMAL) {
				// Ended without an exit of its own: ended from outside (an
				// administrator's reap, or its session closing, which
				// stop() then says). Not restarted behind the user's back.
				this.#halted = 'exit';
				localStorage.removeItem(this.#key(sid));
				this.term.write(`\r\n${DIM}[terminal ended]${PLAIN}\r\n`);
				this.#status('ended', this.#endNote || 'The terminal was ended.', 'Start a new terminal');
				return;
			}
			if (!hello) {
				// Refused before it started: the program could not start,
				// capacity, or the server is away. It is retried.
				this.#explainRefusal(sid);
			} else if (started) {
				this.#status('starting', 'reconnecting to the terminal…');
			}
			if (!hello && resuming && ++this.#tokenFailures >= TOKEN_MAX_FAILURES) {
				localStorage.removeItem(this.#key(sid));
				this.#tokenFailures = 0;
			}
			this.#retryTimer = setTimeout(() => this.#connect(), this.#backoff.next());
		});
	}

	/**
	 * Says why a socket got no hello. A browser does not tell a refused
	 * upgrade (the program could not start, capacity) from a server that is
	 * not there, so dashgate's /healthz is asked: no answer, or a proxy's
	 * 5xx for it, means dashgate is away. The answer is shown only while
	 * this terminal is still between attempts.
	 */
	#explainRefusal(sid) {
		const still = () => this.#sessionId === sid && !this.#ws && !this.#halted;
		fetch(this.#base + 'healthz', { cache: 'no-store' })
			.then((r) => r.ok)
			.catch(() => false)
			.then(async (up) => {
				// Up: ask why (terminal/refusal), e.g. the owner has no Unix
				// account, which no retry mends until an administrator does.
				const why = up ? await this.#refusal(sid) : {};
				if (!still()) return;
				if (why === MISSING) {
					// Not served here (yet): on a node of a cluster, a session
					// moving from a dead node until this one adopts it.
					this.#status('starting', 'The terminal waits for its session on this server; retrying…');
				} else if (why.refusal) this.#status('error', `The terminal cannot start: ${why.refusal}`);
				// A cap met (--max-workers, a user's terminals): room may be
				// made, so it retries, and says which cap.
				else if (why.retrying) this.#status('error', `The terminal could not start: ${why.retrying}; retrying…`);
				else if (up) this.#status('error', 'The terminal could not start; retrying…');
				else this.#status('disconnected', DISCONNECTED);
			});
	}

	/**
	 * Why session sid's terminal is refused (GET terminal/refusal):
	 * {refusal, retrying}, each a sentence or '' (refusal: no retry mends
	 * it; retrying: the cap its last start met), {} when not known,
	 * MISSING when this server does not serve the session (404).
	 */
	async #refusal(sid) {
		try {
			const r = await fetch(this.#base + 'terminal/refusal?' + new URLSearchParams({ session_id: sid }), { cache: 'no-store' });
			if (r.status === 404) return MISSING;
			if (!r.ok) return {};
			const body = await r.json();
			const text = (v) => (typeof v === 'string' ? v : '');
			return { refusal: text(body?.refusal), retrying: text(body?.retrying) };
		} catch {
			return {};
		}
	}

	#control(msg, resuming) {
		if (!msg) return;
		switch (msg.type) {
			case 'hello': {
				this.#backoff.reset();
				this.#tokenFailures = 0;
				if (msg.started === true && resuming && this.#pos > 0) {
					// The terminal shown ended while this page was away (it
					// expired, or its server stopped): a new program, below
					// what the old one left, as after an exit; the reset
					// that follows clears nothing.
					this.term.write(`\x1b[!p\r\n${DIM}── new terminal: the one above ended while this page was away ──${PLAIN}\r\n`);
					this.#pos = 0;
					this.#keepOnReset = true;
				}
				const offset = Number.isSafeInteger(msg.offset) && msg.offset >= 0 ? msg.offset : 0;
				// When the replay starts before what is on screen, drop the overlap.
				this.#skip = resuming ? Math.max(0, this.#pos - offset) : 0;
				this.#pos = offset;
				// Without replay_end (an older server) nothing counts as replayed.
				this.#replayEnd = Number.isSafeInteger(msg.replay_end) ? msg.replay_end : 0;
				if (msg.resume_token) {
					storeToken(this.#key(this.#sessionId), msg.resume_token, this.#pos);
				} else {
					localStorage.removeItem(this.#key(this.#sessionId));
				}
				// The server records this terminal (--record-terminals): say so.
				this.#view.recorded = msg.recorded === true;
				this.#render();
				this.#sendSize();
				break;
			}
			case 'reset':
				if (!this.#keepOnReset) this.term.reset();
				this.#keepOnReset = false;
				this.#skip = 0;
				break;
			case 'exit': {
				this.#halted = 'exit';
				localStorage.removeItem(this.#key(this.#sessionId));
				const code = msg.exit_code ?? '?';
				this.term.write(`\r\n${DIM}[process exited with code ${code}]${PLAIN}\r\n`);
				this.#status('ended', this.#endNote || `The terminal ended (exit code ${code}).`, 'Start a new terminal');
				break;
			}
			case 'attached':
				if (Number.isSafeInteger(msg.count)) this.#shared(msg.count);
				break;
			case 'error':
				console.warn('dashgate: terminal:', msg.message);
				break;
			default:
				console.warn('dashgate: unknown terminal message', msg);
		}
	}

	#output(buf) {
		let bytes = new Uint8Array(buf);
		let at = this.#pos; // stream offset of bytes[0]
		this.#pos += bytes.byteLength;
		if (this.#skip > 0) {
			const n = Math.min(this.#skip, bytes.byteLength);
			this.#skip -= n;
			bytes = bytes.subarray(n);
			at += n;
		}
		const replayed = Math.min(bytes.byteLength, Math.max(0, this.#replayEnd - at));
		if (replayed > 0) this.#writeReplayed(bytes.subarray(0, replayed));
		if (bytes.byteLength > replayed) this.term.write(bytes.subarray(replayed));
		if (!this.#saveTimer) {
			this.#saveTimer = setTimeout(() => {
				this.#saveTimer = 0;
				this.#save();
			}, SAVE_EVERY_MS);
		}
	}

	/**
	 * Writes replayed bytes so that the answers xterm.js gives while parsing
	 * them are dropped. xterm.js parses its queued writes in order, later,
	 * and calls a write's callback right after parsing it: the empty write's
	 * callback opens the window just before these bytes are parsed, theirs
	 * closes it just after.
	 */
	#writeReplayed(bytes) {
		this.term.write('', () => this.#quiet++);
		this.term.write(bytes, () => this.#quiet--);
	}

	/**
	 * Whether xterm.js's data now is its answer to replayed output rather
	 * than the user's. xterm.js parses in a timer task, or at once inside
	 * term.write (called from the socket's message event) right after a
	 * key press; what the user types, pastes, clicks or focuses is sent from
	 * inside that input event (a UIEvent, or a ClipboardEvent for a paste).
	 * So a key that lands while the window is open (xterm.js may pause
	 * between the empty write and the bytes) is still sent.
	 */
	#answeringReplay() {
		if (this.#quiet === 0) return false;
		const ev = window.event;
		return !(ev instanceof UIEvent || ev instanceof ClipboardEvent);
	}

	#input(bytes) {
		const ws = this.#ws;
		if (ws && ws.readyState === WebSocket.OPEN && this.#early.length === 0) {
			ws.send(bytes);
			return;
		}
		if (ws && ws.readyState <= WebSocket.OPEN) {
			this.#hold(bytes); // connecting: typed into the terminal once it is there
			return;
		}
		if ((this.#halted === 'exit' || this.#halted === 'takeover') && !ws && this.#sessionId) {
			// After an exit a key press starts a new terminal ("press a
			// key"); after a takeover it takes the terminal back and is
			// typed into it, as the person meant.
			if (this.#halted === 'takeover') this.#hold(bytes);
			this.restart();
		}
	}

	/** Keeps keys for the socket being connected, at most EARLY_MAX bytes. */
	#hold(bytes) {
		if (this.#earlyBytes + bytes.length > EARLY_MAX) return;
		this.#early.push(bytes);
		this.#earlyBytes += bytes.length;
	}

	/** Sends the keys held while ws connected, in order, once it said hello. */
	#sendEarly(ws) {
		const early = this.#early;
		this.#early = [];
		this.#earlyBytes = 0;
		for (const b of early) ws.send(b);
	}

	#fitNow() {
		try {
			this.#fit.fit();
		} catch (err) {
			console.warn('dashgate: fit', err);
		}
	}

	#sendSize() {
		const ws = this.#ws;
		const { cols, rows } = this.term;
		if (!ws || ws.readyState !== WebSocket.OPEN) return;
		if (cols === this.#sentSize.cols && rows === this.#sentSize.rows) return;
		this.#sentSize = { cols, rows };
		ws.send(JSON.stringify({ type: 'resize', cols, rows }));
	}

	/** Persists {resume_token, offset} of the current session's terminal, if it has a token. */
	#save() {
		const sid = this.#sessionId;
		if (!sid) return;
		const key = this.#key(sid);
		const stored = loadStored(key);
		if (stored?.resume_token && stored.offset !== this.#pos) storeToken(key, stored.resume_token, this.#pos);
	}

	/** Drops the stored resume token of the current session's terminal. */
	#forget() {
		if (this.#sessionId) localStorage.removeItem(this.#key(this.#sessionId));
	}

	/** The localStorage key of this pane's terminal of session sid (ptyKey). */
	#key(sid) {
		return ptyKey(sid, this.#terminalId);
	}

	#disconnect() {
		clearTimeout(this.#retryTimer);
		this.#retryTimer = 0;
		const ws = this.#ws;
		this.#ws = null;
		if (ws && ws.readyState <= WebSocket.OPEN) ws.close(CLOSE_NORMAL);
		this.#shared(0);
	}
}

/** Opens a link of the terminal's output in a new tab, http and https only, without this page as its opener. */
function openLink(uri) {
	let u;
	try {
		u = new URL(uri);
	} catch {
		return;
	}
	if (u.protocol !== 'http:' && u.protocol !== 'https:') return;
	window.open(u.href, '_blank', 'noopener,noreferrer');
}

function parseControl(text) {
	try {
		const msg = JSON.parse(text);
		return msg && typeof msg === 'object' ? msg : null;
	} catch {
		console.warn('dashgate: bad terminal control frame', text);
		return null;
	}
}

/**
 * The localStorage key of terminal tid of session sid: the first's is
 * dashgate.pty.<sid>, as before a session had several; another's
 * dashgate.pty.<sid>.<tid>.
 */
export function ptyKey(sid, tid = FIRST_TERMINAL) {
	return PTY_STORAGE_PREFIX + sid + (tid === FIRST_TERMINAL ? '' : '.' + tid);
}

/** The key row's Ctrl then s: a letter (and @[\\]^_ ? space) as its control character. */
function control1(s) {
	if (s.length !== 1) return s;
	if (s === ' ' || s === '@') return '\x00';
	if (s === '?') return '\x7f';
	const c = s.toUpperCase().charCodeAt(0);
	return c >= 0x40 && c <= 0x5f ? String.fromCharCode(c & 0x1f) : s;
}

function loadStored(key) {
	try {
		const v = JSON.parse(localStorage.getItem(key) ?? 'null');
		return v && typeof v.resume_token === 'string' ? v : null;
	} catch {
		return null;
	}
}

function storeToken(key, token, offset) {
	localStorage.setItem(key, JSON.stringify({ resume_token: token, offset }));
}

// CSP shims. The page's CSP is default-src 'self' (no 'unsafe-inline'), and
// xterm.js's DOM renderer uses two kinds of inline style that it refuses,
// each logged as a violation:
//
//  1. <style> elements holding its theme, font and cell-size rules: without
//     them the terminal is unstyled. Constructed stylesheets are not subject
//     to CSP, so document.createElement('style') hands out an inert
//     <template> instead, whose textContent/innerText/sheet are routed to a
//     CSSStyleSheet adopted by the document until remove() is called. xterm.js
//     only assigns these members and calls remove() on its style elements.
//  2. setAttribute('style', ...) on the <span>s of a row for 24-bit colours
//     (SGR 38;2 / 48;2): they would show in the default colour. Assigning
//     style.cssText is CSSOM, which CSP allows, and has the same effect.
//
// Nothing else on this page creates <style> elements or sets style attributes
// on spans. Without the shims the page works, just with those losses.
let shimsInstalled = false;

function installCspShims() {
	if (shimsInstalled) return;
	shimsInstalled = true;
	if (typeof CSSStyleSheet === 'function' && 'adoptedStyleSheets' in document) {
		const create = document.createElement;
		document.createElement = function (tag, options) {
			if (String(tag).toLowerCase() !== 'style') return create.call(this, tag, options);
			return constructedStyle(create.call(this, 'template'));
		};
	}
	const setAttribute = Element.prototype.setAttribute;
	Element.prototype.setAttribute = function (name, value) {
		if (this instanceof HTMLSpanElement && String(name).toLowerCase() === 'style') {
			this.style.cssText = String(value);
			return;
		}
		setAttribute.call(this, name, value);
	};
}

function constructedStyle(el) {
	const sheet = new CSSStyleSheet();
	let text = '';
	let adopted = false;
	const adopt = () => {
		if (adopted) return;
		adopted = true;
		document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
	};
	const set = (v) => {
		text = v == null ? '' : String(v);
		try {
			sheet.replaceSync(text);
		} catch (err) {
			console.warn('dashgate: style shim', err);
		}
		adopt();
	};
	const text$ = { get: () => text, set, configurable: true };
	Object.defineProperty(el, 'textContent', text$);
	Object.defineProperty(el, 'innerText', text$);
	Object.defineProperty(el, 'sheet', {
		get: () => {
			adopt();
			return sheet;
		},
		configurable: true,
	});
	el.remove = function () {
		document.adoptedStyleSheets = document.adoptedStyleSheets.filter((s) => s !== sheet);
		adopted = false;
		Element.prototype.remove.call(this);
	};
	el.dataset.xtermStyle = '';
	return el;
}
