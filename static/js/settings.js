// Per-user settings (issue 42): the Settings dialog of the top bar
// (templates/dashboard.templ, data-testid="settings-dialog") and what the
// settings do to this page. They are kept in the server's store, per user
// (settings.get / settings.set, docs/PROTOCOL.md), so they hold in every
// browser the user opens: the theme and the terminal font apply as soon
// as the chat socket has read them; the default agent is where the agent
// picker starts; the default model and the system prompt the server
// applies itself (a new session's model, every prompt).
//
// The theme: theme.js keeps this browser's choice in localStorage for the
// first paint; the stored setting, once read, wins and becomes this
// browser's. A choice in the top bar's theme select is stored too: theme.js
// marks it unsaved (dashgate.theme.unsaved) until the server has it, so a
// reload before then, or a choice made on the admin page (which has no
// chat socket), is sent on the next load instead of giving way to the
// older stored one.
//
// localStorage keys:
//   dashgate.terminal.font   {size, family} as last read: applied before
//                            they are read again, so the terminal's first
//                            size is already the right one
//   dashgate.theme.unsaved   (theme.js) a theme chosen and not stored yet

import { RpcError } from './rpc.js';

const FONT_KEY = 'dashgate.terminal.font';
const UNSAVED_THEME_KEY = 'dashgate.theme.unsaved';
const THEMES = ['system', 'light', 'dark'];

/** The fields of the settings, as settings.get names them. */
const FIELDS = ['default_agent', 'default_model', 'system_prompt', 'theme', 'terminal_font_size', 'terminal_font_family'];

function storageGet(key) {
	try {
		return localStorage.getItem(key);
	} catch {
		return null; // storage disabled
	}
}

function storageSet(key, value) {
	try {
		if (value === null) localStorage.removeItem(key);
		else localStorage.setItem(key, value);
	} catch {
		// storage disabled: the page still has them
	}
}

/** The theme chosen in this browser and not stored yet, or ''. */
function unsavedTheme() {
	const v = storageGet(UNSAVED_THEME_KEY);
	return THEMES.includes(v) ? v : '';
}

export class Settings {
	#rpc;
	#terminal;
	#els;
	#hooks;
	#current = null; // the settings as last read or written
	#shown = null; // the form's values when the dialog opened

	/**
	 * @param {import('./rpc.js').ChatClient} rpc
	 * @param {import('./terminal.js').TerminalPane} terminal
	 * @param {{dialog: HTMLDialogElement, open: HTMLButtonElement, form: HTMLFormElement, agent: HTMLSelectElement,
	 *          model: HTMLSelectElement, systemPrompt: HTMLTextAreaElement, theme: HTMLSelectElement,
	 *          fontSize: HTMLInputElement, fontFamily: HTMLInputElement, error: HTMLElement, cancel: HTMLButtonElement,
	 *          save: HTMLButtonElement}} els
	 * @param {{defaultAgent: (name: string) => void}} hooks where the default agent goes
	 */
	constructor(rpc, terminal, els, hooks) {
		this.#rpc = rpc;
		this.#terminal = terminal;
		this.#els = els;
		this.#hooks = hooks;
		try {
			const f = JSON.parse(storageGet(FONT_KEY) ?? 'null');
			if (f) terminal.setFont(Number(f.size) || 0, typeof f.family === 'string' ? f.family : '');
		} catch {
			// not ours: read again from the server
		}
		els.open.addEventListener('click', () => this.open());
		els.cancel.addEventListener('click', () => els.dialog.close());
		els.form.addEventListener('submit', (ev) => {
			ev.preventDefault();
			this.save();
		});
		document.addEventListener('dashgate:theme-chosen', (ev) => this.#themeChosen(ev.detail?.choice));
	}

	/** The settings as last read or written (null before). */
	current() {
		return this.#current ? { ...this.#current } : null;
	}

	/**
	 * Reads the settings (each time the chat socket is ready) and applies
	 * them; a theme chosen here and not stored yet is stored first.
	 */
	async load() {
		const unsaved = unsavedTheme();
		try {
			const s = unsaved ? await this.#rpc.call('settings.set', { theme: unsaved }) : await this.#rpc.call('settings.get', {});
			if (unsaved && storageGet(UNSAVED_THEME_KEY) === unsaved) storageSet(UNSAVED_THEME_KEY, null);
			this.#apply(s);
		} catch (err) {
			console.warn('dashgate: settings', err);
		}
	}

	/** Keeps s as the settings, every field there. */
	#keep(s) {
		this.#current = Object.fromEntries(FIELDS.map((k) => [k, s?.[k] ?? (k === 'terminal_font_size' ? 0 : '')]));
		return this.#current;
	}

	/** Keeps settings s and applies them to the page. */
	#apply(s) {
		const c = this.#keep(s);
		// A choice made here since wins over the one read (it is on its way).
		if (THEMES.includes(c.theme) && !unsavedTheme() && window.dashgateTheme && window.dashgateTheme.choice !== c.theme) {
			window.dashgateTheme.set(c.theme);
		}
		const size = Number(c.terminal_font_size) || 0;
		this.#terminal.setFont(size, c.terminal_font_family);
		storageSet(FONT_KEY, size || c.terminal_font_family ? JSON.stringify({ size, family: c.terminal_font_family }) : null);
		this.#hooks.defaultAgent(c.default_agent);
	}

	/** Stores a theme chosen in the top bar (theme.js marked it unsaved). */
	async #themeChosen(choice) {
		if (!THEMES.includes(choice) || !this.#rpc.ready) return; // load() sends it
		try {
			const s = await this.#rpc.call('settings.set', { theme: choice });
			if (storageGet(UNSAVED_THEME_KEY) === choice) storageSet(UNSAVED_THEME_KEY, null);
			if (this.#current) this.#current.theme = s.theme;
		} catch (err) {
			console.warn('dashgate: settings.set theme', err);
		}
	}

	/**
	 * Opens the dialog with the settings as stored, and the agents and
	 * models the server offers now (agent.list, model.list).
	 */
	async open() {
		const { dialog } = this.#els;
		if (dialog.open) return;
		this.#showError('');
		let agents = [];
		let models = null;
		if (this.#rpc.ready) {
			const [s, a, m] = await Promise.allSettled([
				this.#rpc.call('settings.get', {}),
				this.#rpc.call('agent.list', {}),
				this.#rpc.call('model.list', {}),
			]);
			if (s.status === 'fulfilled') this.#keep(s.value);
			else this.#showError(`could not read the settings: ${s.reason?.message}`);
			if (a.status === 'fulfilled' && Array.isArray(a.value.agents)) agents = a.value.agents.filter((x) => x && typeof x.name === 'string');
			if (m.status === 'fulfilled' && Array.isArray(m.value.models)) models = m.value;
		}
		this.#fill(this.#current ?? Object.fromEntries(FIELDS.map((k) => [k, k === 'terminal_font_size' ? 0 : ''])), agents, models);
		if (!dialog.open) dialog.showModal();
	}

	/** Puts s into the form, with the agents and models offered (models null: none known). */
	#fill(s, agents, models) {
		const e = this.#els;
		const opt = (value, text) => {
			const o = document.createElement('option');
			o.value = value;
			o.textContent = text;
			return o;
		};
		const def = agents.find((a) => a.default);
		e.agent.replaceChildren(
			opt('', def ? `the server's default (${def.name})` : "the server's default"),
			...agents.map((a) => opt(a.name, a.kind === 'builtin' ? `${a.name} (built-in)` : a.name)),
		);
		const list = (models?.models ?? []).filter((m) => typeof m === 'string');
		e.model.replaceChildren(
			opt('', models?.default ? `the server's default (${models.default})` : "the server's default"),
			...list.map((m) => opt(m, m)),
		);
		// One the server no longer offers stays shown as it is stored.
		if (s.default_agent && !agents.some((a) => a.name === s.default_agent)) e.agent.append(opt(s.default_agent, `${s.default_agent} (not offered)`));
		if (s.default_model && !list.includes(s.default_model)) e.model.append(opt(s.default_model, `${s.default_model} (not listed)`));
		e.agent.value = s.default_agent;
		e.model.value = s.default_model;
		e.systemPrompt.value = s.system_prompt;
		e.theme.value = THEMES.includes(s.theme) ? s.theme : '';
		e.fontSize.value = s.terminal_font_size ? String(s.terminal_font_size) : '';
		e.fontFamily.value = s.terminal_font_family;
		this.#shown = this.#values();
	}

	/** The form's values, as settings.set takes them. */
	#values() {
		const e = this.#els;
		return {
			default_agent: e.agent.value,
			default_model: e.model.value,
			system_prompt: e.systemPrompt.value,
			theme: e.theme.value,
			terminal_font_size: e.fontSize.value.trim() === '' ? 0 : Number(e.fontSize.value),
			terminal_font_family: e.fontFamily.value.trim(),
		};
	}

	/** Sends what was changed in the form; closes the dialog once stored, or says why not. */
	async save() {
		const now = this.#values();
		const patch = Object.fromEntries(Object.entries(now).filter(([k, v]) => this.#shown?.[k] !== v));
		if (Object.keys(patch).length === 0) {
			this.#els.dialog.close();
			return;
		}
		if ('terminal_font_size' in patch && !Number.isInteger(patch.terminal_font_size)) {
			this.#showError('The terminal font size is a whole number, from 8 to 32.');
			return;
		}
		this.#els.save.disabled = true;
		try {
			const s = await this.#rpc.call('settings.set', patch);
			if ('theme' in patch) storageSet(UNSAVED_THEME_KEY, null);
			this.#apply(s);
			this.#els.dialog.close();
		} catch (err) {
			this.#showError(err instanceof RpcError && err.code !== null ? err.message.replace(/^invalid params: /, '') : `not saved: ${err.message}`);
		} finally {
			this.#els.save.disabled = false;
		}
	}

	#showError(text) {
		this.#els.error.textContent = text;
		this.#els.error.hidden = !text;
	}
}
