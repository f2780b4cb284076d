// The terminal pane's tabs (issue 42): a session may run several terminals
// (/ws/pty?terminal=ID, docs/PROTOCOL.md), each shown by a TerminalPane of
// its own (terminal.js) in an element of its own inside the pane's
// terminal element, one visible at a time.
//
// The tab strip (data-testid="terminal-tabs") has a tab per terminal
// (data-testid="terminal-tab", data-terminal-id, data-active on the one
// shown): its name, a button (aria-pressed) that shows it, and but on a
// lone tab a × (data-testid="terminal-tab-close") that, once confirmed,
// closes it: its socket goes and terminal.close ends its program. "+"
// (data-testid="terminal-tab-new") starts another, up to MAX_TABS. A
// double-click on a tab's name (or F2 on it) renames it; the names are
// this browser's, per session.
//
// Every tab keeps its socket open while the page shows its session,
// hidden ones too (their output arrives as it comes), so no terminal of
// an open page is parked; when the page goes, each one parks for
// --pty-keepalive and ends unless the page comes back. After a reload the
// page rebuilds the tabs from session.resume's terminals, each resumed
// with its own token, in the order this browser had them (session.resume
// lists them in the order they started, which after a restart is the
// order the page's sockets came back in); terminals it did not know
// come after.
//
// The pane's lines and rows are the page's, one each, and act on the tab
// shown: the status and shared lines (written by the shown pane), the
// key row, the search row, the Download row and a file dropped on the
// pane (into the directory of the shown terminal's shell).
//
// The transfer line (data-testid="terminal-transfer": how an upload or a
// download went) is the tab's it concerns: it shows while that tab is
// shown, and comes back with it. A success goes by itself after
// NOTE_DONE_MS; an error stays until its × is pressed.
//
// While no session is shown (a first visit: "Start a session") the head
// row (data-testid="terminal-head": the strip, Download and Search) is
// hidden, and the search and Download rows are closed: there is nothing
// to act on.
//
// localStorage keys:
//   dashgate.termtabs.<session_id>  {"names": {id: name}, "active": id, "order": [id, …]}

import { FIRST_TERMINAL, PTY_STORAGE_PREFIX, TerminalPane } from './terminal.js';

const TABS_PREFIX = 'dashgate.termtabs.';
// The most terminals a session runs (sessions.MaxTerminalsPerSession).
export const MAX_TABS = 8;
const NAME_MAX = 40;
// How long the transfer line says a transfer went well.
const NOTE_DONE_MS = 8000;

export class TerminalTabs {
	#el; // the element the panes' elements go in
	#base;
	#ui;
	#sid = null; // the session shown
	#panes = new Map(); // terminal id -> TerminalPane, in tab order
	#active = null; // the pane shown
	#ctrl = null; // the key row's Ctrl button while it is pressed
	#font = null; // [size, family] of setFont, for panes made later
	#notes = new Map(); // TerminalPane -> {text, state, timer}: its transfer line

	/**
	 * @param {HTMLElement} el the element the terminals' elements go in
	 * @param {string} base the base path, starting and ending with "/"
	 * @param {object} ui TerminalPane's lines (page, status, text, restart, shared, sharedText, takeover, recorded, start) and the page's: keys (the key row), search and files (the rows of terminal.js before issue 42), head (the row of the strip, Download and Search), tabs (the strip), newTab (its +), close(sid, tid) (terminal.close) and confirm(text)
	 */
	constructor(el, base, ui) {
		this.#el = el;
		this.#base = base;
		this.#ui = ui;
		ui.restart.addEventListener('click', () => this.#active?.restart());
		ui.takeover?.addEventListener('click', () => this.#active?.takeOver());
		ui.newTab.addEventListener('click', () => this.#newTab());
		this.#strip(ui.tabs);
		if (ui.keys) this.#keyRow(ui.keys);
		if (ui.search) this.#searchBar(ui.search);
		if (ui.files) this.#fileTransfer(ui.files);
		this.#show([FIRST_TERMINAL]);
	}

	/** The xterm.js instance of the tab shown. */
	get term() {
		return this.#active.term;
	}

	get sessionId() {
		return this.#sid;
	}

	/**
	 * Shows session sid's terminals: terminals (session.resume's, [{terminal,
	 * pid}]) say which run; none means its first, started on connect. For
	 * the session already shown it adds a tab for a terminal another page
	 * started and attaches each pane again (retake: one that stopped, taken
	 * over or exited, is attached afresh; see TerminalPane.attach). null
	 * shows that no session is open.
	 */
	attach(sid, retake = false, terminals = null) {
		let ids = Array.isArray(terminals) ? terminals.map((t) => t?.terminal).filter((id) => typeof id === 'string' && id) : [];
		if (sid && sid === this.#sid) {
			ids = this.#ordered(ids);
			for (const id of ids) if (!this.#panes.has(id) && this.#panes.size < MAX_TABS) this.#add(id);
			for (const pane of this.#panes.values()) pane.attach(sid, retake);
			this.#render();
			return;
		}
		this.#sid = sid;
		ids = this.#ordered(ids);
		if (!sid) {
			// Nothing to search or download from.
			if (this.#ui.search) {
				this.#ui.search.bar.hidden = true;
				this.#ui.search.status.textContent = '';
			}
			if (this.#ui.files) this.#ui.files.row.hidden = true;
		}
		this.#show(sid && ids.length > 0 ? ids : [FIRST_TERMINAL]);
	}

	/** The session is gone: every tab stops as TerminalPane.stop says. */
	stop(note) {
		for (const pane of this.#panes.values()) pane.stop(note);
	}

	/** Says why a terminal ended (the chat's notice of an admin's reap), to the tabs whose terminal did. */
	ended(note) {
		for (const pane of this.#panes.values()) pane.ended(note);
	}

	refit() {
		this.#active.refit();
	}

	text() {
		return this.#active.text();
	}

	state() {
		return this.#active.state();
	}

	/** The tabs, in order, for tests: [{id, name, active, state, text}]. */
	tabs() {
		const names = this.#names();
		return [...this.#panes.values()].map((p) => ({
			id: p.terminalId,
			name: names[p.terminalId] ?? '',
			active: p === this.#active,
			state: p.state(),
			text: p.text(),
		}));
	}

	/** Sets every tab's font (settings.js), and the font of tabs made later. */
	setFont(size, family) {
		this.#font = [size, family];
		for (const pane of this.#panes.values()) pane.setFont?.(size, family);
	}

	/** Forgets what this browser keeps of session sid's terminals (it was closed). */
	forget(sid) {
		for (let i = localStorage.length - 1; i >= 0; i--) {
			const k = localStorage.key(i);
			if (k === PTY_STORAGE_PREFIX + sid || k?.startsWith(PTY_STORAGE_PREFIX + sid + '.') || k === TABS_PREFIX + sid) {
				localStorage.removeItem(k);
			}
		}
	}

	/**
	 * ids in the order of the tabs this browser last had for the session
	 * shown (its stored order; before there was one, its names'), the
	 * ones it did not have after them, as they came.
	 */
	#ordered(ids) {
		const saved = this.#stored().order;
		const known = Array.isArray(saved) ? saved : Object.keys(this.#names());
		const at = new Map(known.map((id, i) => [id, i]));
		const rank = (id) => at.get(id) ?? known.length;
		return ids.map((id, i) => ({ id, i })).sort((a, b) => rank(a.id) - rank(b.id) || a.i - b.i).map((x) => x.id);
	}

	/** Replaces every tab with one per id, and shows the one shown last (else the first). */
	#show(ids) {
		for (const pane of this.#panes.values()) {
			this.#dropNote(pane);
			pane.dispose();
		}
		this.#panes.clear();
		this.#active = null;
		for (const id of ids.slice(0, MAX_TABS)) this.#add(id);
		const names = this.#names();
		for (const id of Object.keys(names)) if (!this.#panes.has(id)) delete names[id];
		this.#saveNames(names);
		const want = this.#stored().active;
		this.#select(this.#panes.get(want) ?? this.#panes.values().next().value, false);
		for (const pane of this.#panes.values()) pane.attach(this.#sid);
	}

	/** Makes the pane of terminal id (not attached yet), hidden. */
	#add(id) {
		const el = document.createElement('div');
		el.className = 'terminal-screen';
		el.dataset.terminalId = id;
		el.dataset.active = 'false';
		this.#el.append(el);
		const ui = this.#ui;
		const pane = new TerminalPane(el, this.#base, {
			page: ui.page,
			terminal: id,
			status: ui.status,
			text: ui.text,
			restart: ui.restart,
			shared: ui.shared,
			sharedText: ui.sharedText,
			recorded: ui.recorded,
			start: ui.start,
			takeCtrl: () => pane === this.#active && this.#takeCtrl(),
		});
		pane.setActive(false);
		if (this.#font) pane.setFont?.(...this.#font);
		this.#panes.set(id, pane);
		if (this.#sid && !this.#names()[id]) this.#name(id, this.#freeName());
		return pane;
	}

	/** Shows pane, hiding the others; focus gives it the keyboard. */
	#select(pane, focus = true) {
		if (!pane) return;
		if (this.#active && this.#active !== pane) {
			this.#active.setActive(false);
			this.#active.term.clearSelection();
		}
		this.#active = pane;
		pane.setActive(true);
		if (this.#sid) this.#store({ active: pane.terminalId });
		this.#setCtrl(null);
		const search = this.#ui.search;
		if (search && !search.bar.hidden) search.status.textContent = '';
		this.#showNote();
		this.#render();
		if (focus) pane.term.focus();
	}

	/** "+": a new terminal of the session shown, in a tab of its own, shown. */
	#newTab() {
		if (!this.#sid || this.#panes.size >= MAX_TABS) return;
		let id;
		do id = Math.random().toString(36).slice(2, 10);
		while (!id || this.#panes.has(id) || id === FIRST_TERMINAL);
		const pane = this.#add(id);
		this.#select(pane);
		pane.attach(this.#sid);
	}

	/** ×: closes terminal id after a confirm: its tab goes, its program is ended (terminal.close). */
	async #closeTab(id) {
		const pane = this.#panes.get(id);
		if (!pane || this.#panes.size < 2) return;
		const name = this.#names()[id] || id;
		const question = `Close terminal “${name}”? The programs running in it are ended.`;
		if (!(await (this.#ui.confirm ? this.#ui.confirm(question) : window.confirm(question)))) return;
		if (this.#panes.get(id) !== pane) return;
		const sid = this.#sid;
		const ids = [...this.#panes.keys()];
		this.#panes.delete(id);
		this.#dropNote(pane);
		pane.dispose(true);
		if (this.#active === pane) {
			this.#active = null;
			this.#select(this.#panes.get(ids[ids.indexOf(id) + 1]) ?? this.#panes.get(ids[ids.indexOf(id) - 1]));
		}
		const names = this.#names();
		delete names[id];
		this.#saveNames(names);
		this.#render();
		// Its socket went (it parks for --pty-keepalive at worst); this
		// ends it now. The answer comes once it is reaped.
		if (sid) await this.#ui.close?.(sid, id);
	}

	/** Redraws the strip: a tab per pane, in order, and the + while there is room. */
	#render() {
		const strip = this.#ui.tabs;
		const names = this.#names();
		const lone = this.#panes.size < 2;
		for (const el of [...strip.querySelectorAll('[data-testid="terminal-tab"]')]) {
			if (!this.#panes.has(el.dataset.terminalId)) el.remove();
		}
		let at = strip.firstElementChild;
		for (const [id, pane] of this.#panes) {
			let tab = strip.querySelector(`[data-testid="terminal-tab"][data-terminal-id="${CSS.escape(id)}"]`);
			if (!tab) tab = tabElement(id);
			if (tab !== at) strip.insertBefore(tab, at);
			at = tab.nextElementSibling;
			const name = names[id] || id;
			const label = tab.querySelector('.terminal-tab-name');
			label.textContent = name;
			const shown = pane === this.#active;
			tab.dataset.active = shown ? 'true' : 'false';
			label.setAttribute('aria-pressed', shown ? 'true' : 'false');
			const close = tab.querySelector('[data-testid="terminal-tab-close"]');
			close.hidden = lone;
			close.setAttribute('aria-label', `Close terminal ${name}`);
		}
		if (this.#ui.head) this.#ui.head.hidden = !this.#sid;
		this.#saveOrder();
		this.#ui.newTab.disabled = !this.#sid || this.#panes.size >= MAX_TABS;
		this.#ui.newTab.title = this.#panes.size >= MAX_TABS ? `A session runs at most ${MAX_TABS} terminals` : 'A new terminal in this session';
	}

	/** Wires the strip: a click shows a tab, × closes it, a double-click or F2 on its name renames it. */
	#strip(strip) {
		strip.addEventListener('click', (ev) => {
			const tab = ev.target instanceof Element ? ev.target.closest('[data-testid="terminal-tab"]') : null;
			if (!tab || ev.target.closest('input')) return;
			const id = tab.dataset.terminalId;
			if (ev.target.closest('[data-testid="terminal-tab-close"]')) {
				this.#closeTab(id);
				return;
			}
			this.#select(this.#panes.get(id));
		});
		strip.addEventListener('dblclick', (ev) => {
			const tab = ev.target instanceof Element ? ev.target.closest('[data-testid="terminal-tab"]') : null;
			if (tab && !ev.target.closest('[data-testid="terminal-tab-close"]')) this.#rename(tab);
		});
		strip.addEventListener('keydown', (ev) => {
			const tab = ev.target instanceof Element ? ev.target.closest('[data-testid="terminal-tab"]') : null;
			if (tab && ev.key === 'F2' && ev.target.closest('.terminal-tab-name')) {
				ev.preventDefault();
				this.#rename(tab);
			}
		});
	}

	/** Edits a tab's name in place: Enter (or leaving it) keeps it, Esc does not; "" goes back to a number. */
	#rename(tab) {
		const label = tab.querySelector('.terminal-tab-name');
		if (!label || tab.querySelector('input')) return;
		const id = tab.dataset.terminalId;
		const input = document.createElement('input');
		input.className = 'terminal-tab-rename';
		input.dataset.testid = 'terminal-tab-rename';
		input.maxLength = NAME_MAX;
		input.value = this.#names()[id] ?? '';
		input.setAttribute('aria-label', 'Terminal name');
		label.hidden = true;
		tab.insertBefore(input, label);
		input.focus();
		input.select();
		let done = false;
		const finish = (keep) => {
			if (done) return;
			done = true;
			const name = input.value.trim().slice(0, NAME_MAX);
			input.remove();
			label.hidden = false;
			if (keep && this.#panes.has(id)) this.#name(id, name || this.#freeName(id));
			this.#render();
		};
		input.addEventListener('keydown', (ev) => {
			ev.stopPropagation();
			if (ev.key === 'Enter') {
				ev.preventDefault();
				finish(true);
				this.#active?.term.focus();
			} else if (ev.key === 'Escape') {
				ev.preventDefault();
				finish(false);
			}
		});
		input.addEventListener('blur', () => finish(true));
	}

	/** The smallest "Terminal N" no tab of the session is called. */
	/** The first "Terminal N" no tab but except (a tab being renamed) is named. */
	#freeName(except = null) {
		const taken = new Set(Object.entries(this.#names()).filter(([id]) => id !== except).map(([, name]) => name));
		let n = 1;
		while (taken.has(`Terminal ${n}`)) n++;
		return `Terminal ${n}`;
	}

	/** Keeps the order of the tabs, for the next page of the session (#ordered). */
	#saveOrder() {
		if (!this.#sid) return;
		const order = [...this.#panes.keys()];
		const saved = this.#stored().order;
		if (!Array.isArray(saved) || saved.join('\n') !== order.join('\n')) this.#store({ order });
	}

	#name(id, name) {
		const names = this.#names();
		names[id] = name;
		this.#saveNames(names);
	}

	#names() {
		const names = this.#stored().names;
		return names && typeof names === 'object' ? names : {};
	}

	#saveNames(names) {
		this.#store({ names });
	}

	#stored() {
		if (!this.#sid) return {};
		try {
			const v = JSON.parse(localStorage.getItem(TABS_PREFIX + this.#sid) ?? '{}');
			return v && typeof v === 'object' ? v : {};
		} catch {
			return {};
		}
	}

	#store(patch) {
		if (!this.#sid) return;
		try {
			localStorage.setItem(TABS_PREFIX + this.#sid, JSON.stringify({ ...this.#stored(), ...patch }));
		} catch {
			// Full or refused storage: the names last as long as the page.
		}
	}

	/**
	 * Wires the key row: each button (data-key) is a key typed into the
	 * terminal shown. A press does not take the focus from the terminal (a
	 * phone's keyboard stays up). Ctrl (aria-pressed) stays pressed until
	 * the next key, from the row or the keyboard.
	 */
	#keyRow(row) {
		row.addEventListener('pointerdown', (ev) => {
			if (ev.target instanceof Element && ev.target.closest('button')) ev.preventDefault();
		});
		row.addEventListener('click', (ev) => {
			const b = ev.target instanceof Element ? ev.target.closest('button[data-key]') : null;
			if (!b || !this.#active) return;
			const key = b.dataset.key;
			if (key === 'ctrl') {
				this.#setCtrl(this.#ctrl ? null : b);
			} else {
				this.#active.typeKey(key, this.#takeCtrl());
			}
			this.#active.term.focus();
		});
	}

	#setCtrl(button) {
		if (this.#ctrl) this.#ctrl.setAttribute('aria-pressed', 'false');
		this.#ctrl = button;
		if (button) button.setAttribute('aria-pressed', 'true');
	}

	/** Whether Ctrl was pressed; it is not any more. */
	#takeCtrl() {
		const was = Boolean(this.#ctrl);
		this.#setCtrl(null);
		return was;
	}

	/** Opens the search row (Alt+Shift+F, its Search button) with its text selected. */
	openSearch() {
		const ui = this.#ui.search;
		if (!ui || !this.#sid) return;
		if (ui.bar.hidden) {
			ui.bar.hidden = false;
			this.refit();
		}
		ui.input.focus();
		ui.input.select();
	}

	/** Closes the search row and gives the keyboard back to the terminal shown. */
	closeSearch() {
		const ui = this.#ui.search;
		if (!ui || ui.bar.hidden) return;
		ui.bar.hidden = true;
		ui.status.textContent = '';
		this.#active.term.clearSelection();
		this.refit();
		this.#active.term.focus();
	}

	/** Wires the search row: it finds in the scrollback of the terminal shown. */
	#searchBar(ui) {
		const find = (back, incremental = false) => {
			const q = ui.input.value;
			const found = this.#active.find(q, back, incremental);
			ui.status.textContent = !q || found ? '' : 'no match';
		};
		ui.open.addEventListener('click', () => this.openSearch());
		ui.close.addEventListener('click', () => this.closeSearch());
		ui.next.addEventListener('click', () => find(false));
		ui.prev.addEventListener('click', () => find(true));
		ui.input.addEventListener('input', () => find(false, true));
		ui.input.addEventListener('keydown', (ev) => {
			if (ev.key === 'Enter') {
				ev.preventDefault();
				find(ev.shiftKey);
			} else if (ev.key === 'Escape') {
				ev.preventDefault();
				this.closeSearch();
			}
		});
	}

	/**
	 * Sets pane's transfer line: text ("" clears it), state "done" (it
	 * clears itself after NOTE_DONE_MS), "error" (it stays) or "" (under
	 * way). It shows while pane is the one shown.
	 */
	#note(pane, text, state = '') {
		this.#dropNote(pane);
		if (text) {
			const note = { text, state, timer: 0 };
			if (state === 'done') note.timer = setTimeout(() => this.#notes.get(pane) === note && this.#note(pane, ''), NOTE_DONE_MS);
			this.#notes.set(pane, note);
		}
		if (pane === this.#active) this.#showNote();
	}

	/** Forgets pane's transfer line (the pane goes), without writing the line. */
	#dropNote(pane) {
		clearTimeout(this.#notes.get(pane)?.timer);
		this.#notes.delete(pane);
	}

	/** Writes the transfer line of the tab shown. */
	#showNote() {
		const ui = this.#ui.files;
		if (!ui) return;
		const note = this.#notes.get(this.#active);
		const text = note?.text ?? '';
		const hide = !text;
		ui.text.textContent = text;
		if (note?.state) ui.line.dataset.state = note.state;
		else delete ui.line.dataset.state;
		if (ui.line.hidden === hide) return;
		ui.line.hidden = hide;
		this.refit();
	}

	/**
	 * Wires file transfer (issue 42): a file dropped on the terminal pane is
	 * uploaded into the current directory of the shell of the terminal
	 * shown (POST sessions/{id}/terminal/files?name=&terminal=), written as
	 * the session's owner; Download asks for a path and downloads it (GET
	 * …?path=&terminal=). The transfer line of the tab it concerns says how
	 * an upload went, or why a download is refused.
	 */
	#fileTransfer(ui) {
		const pane = this.#el.closest('.terminal-pane') ?? this.#el;
		ui.dismiss.addEventListener('click', () => this.#active && this.#note(this.#active, ''));
		// The session and terminal shown when the transfer starts, and what
		// says how it went in that terminal's transfer line.
		const target = () => {
			const p = this.#active;
			if (!this.#sid || !p) return null;
			const sid = this.#sid;
			const url = (q) => {
				if (p.terminalId !== FIRST_TERMINAL) q.terminal = p.terminalId;
				return `${this.#base}sessions/${encodeURIComponent(sid)}/terminal/files?${new URLSearchParams(q)}`;
			};
			return { url, say: (text, state = '') => this.#panes.get(p.terminalId) === p && this.#note(p, text, state) };
		};
		pane.addEventListener('dragover', (ev) => {
			if (!this.#sid || !ev.dataTransfer?.types.includes('Files')) return;
			ev.preventDefault();
			ev.dataTransfer.dropEffect = 'copy';
			pane.classList.add('drop-target');
		});
		pane.addEventListener('dragleave', (ev) => {
			if (!pane.contains(ev.relatedTarget)) pane.classList.remove('drop-target');
		});
		pane.addEventListener('drop', async (ev) => {
			pane.classList.remove('drop-target');
			const list = [...(ev.dataTransfer?.files ?? [])];
			const to = target();
			if (!to || list.length === 0) return;
			ev.preventDefault();
			const { url, say } = to;
			for (const f of list) {
				say(`Uploading ${f.name}…`);
				try {
					const r = await fetch(url({ name: f.name }), { method: 'POST', body: f, headers: { 'Content-Type': 'application/octet-stream' } });
					if (!r.ok) {
						say(`${f.name} was not uploaded: ${(await r.text()).trim() || r.statusText}`, 'error');
						return;
					}
					const done = await r.json();
					say(`Uploaded ${done.path} (${sizeText(done.size)}).`, 'done');
				} catch (err) {
					say(`${f.name} was not uploaded: ${err.message}`, 'error');
					return;
				}
			}
		});
		const closeRow = () => {
			if (ui.row.hidden) return;
			ui.row.hidden = true;
			this.refit();
			this.#active.term.focus();
		};
		ui.open.addEventListener('click', () => {
			if (!this.#sid) return;
			ui.row.hidden = false;
			this.refit();
			ui.path.focus();
			ui.path.select();
		});
		ui.close.addEventListener('click', closeRow);
		const download = async () => {
			const path = ui.path.value.trim();
			const to = target();
			if (!path || !to) return;
			const { url, say } = to;
			// Fetched, not navigated to: a refusal is said here, not as an
			// error page or a saved error text. The file passes through
			// memory, as a blob.
			const r = await fetch(url({ path }), { method: 'GET' }).catch((err) => ({ ok: false, statusText: err.message, text: async () => '' }));
			if (!r.ok) {
				say(`Not downloaded: ${(await r.text()).trim() || r.statusText}`, 'error');
				return;
			}
			const blob = await r.blob();
			const a = document.createElement('a');
			a.href = URL.createObjectURL(blob);
			a.download = path.split('/').pop() || 'download';
			document.body.append(a);
			a.click();
			a.remove();
			setTimeout(() => URL.revokeObjectURL(a.href), 60_000);
			say(`Downloaded ${a.download} (${sizeText(blob.size)}).`, 'done');
			closeRow();
		};
		ui.go.addEventListener('click', download);
		ui.path.addEventListener('keydown', (ev) => {
			if (ev.key === 'Enter') {
				ev.preventDefault();
				download();
			} else if (ev.key === 'Escape') {
				ev.preventDefault();
				closeRow();
			}
		});
	}
}

/** A tab of the strip: its name (a button that shows it), and its × (hidden while it is alone). */
function tabElement(id) {
	const tab = document.createElement('div');
	tab.className = 'terminal-tab';
	tab.dataset.testid = 'terminal-tab';
	tab.dataset.terminalId = id;
	const name = document.createElement('button');
	name.type = 'button';
	name.className = 'terminal-tab-name';
	name.dataset.testid = 'terminal-tab-select';
	name.title = 'Show this terminal; double-click (or F2) to rename it';
	const close = document.createElement('button');
	close.type = 'button';
	close.className = 'terminal-tab-close';
	close.dataset.testid = 'terminal-tab-close';
	close.title = 'Close this terminal (the programs in it are ended)';
	close.textContent = '×';
	tab.append(name, close);
	return tab;
}

/** n bytes in words: "812 B", "12.5 KiB", "3.0 MiB". */
function sizeText(n) {
	if (!(n >= 1024)) return `${n} B`;
	if (n < 1 << 20) return `${(n / 1024).toFixed(1)} KiB`;
	return `${(n / (1 << 20)).toFixed(1)} MiB`;
}
