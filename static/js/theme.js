// Theme: light, dark, or the system's (prefers-color-scheme), chosen per
// browser and remembered in localStorage ("dashgate.theme").
//
// A classic script, loaded from <head> without defer or async, so that it
// runs before <body> is parsed and the first paint already has the chosen
// theme (the CSP allows no inline script; a module would run after parsing).
// It only sets <html data-theme="light|dark"> (absent for "system"); the
// colours are the CSS's: the stylesheets say `color-scheme: light dark` and
// give every colour as light-dark(light, dark), so "system" follows the
// system with no script at all, and data-theme pins one side.
//
// Every <select data-testid="theme-select"> of the page (options system,
// light, dark) shows and sets the choice; another tab's choice applies here
// too (the storage event). A choice made there is also the user's setting
// (issue 42): it is marked unsaved ("dashgate.theme.unsaved") and told to
// the dashboard's settings.js (a "dashgate:theme-chosen" event, detail
// {choice}), which stores it on the server; the stored setting, read by
// the dashboard, sets the choice here in every browser (.set).
//
// window.dashgateTheme is the theme for scripts:
//   .choice          'system' | 'light' | 'dark'
//   .theme           the one in effect: 'light' | 'dark'
//   .set(choice)     choose (and remember)
//   .xterm()         the xterm.js theme (ITheme) for .theme
// and the document gets a "dashgate:theme" event (detail {theme, choice})
// whenever .theme or .choice changes.
(() => {
	const KEY = 'dashgate.theme';
	const UNSAVED_KEY = 'dashgate.theme.unsaved'; // a choice the server has not stored yet (settings.js)
	const CHOICES = ['system', 'light', 'dark'];
	const root = document.documentElement;
	const prefersLight = window.matchMedia('(prefers-color-scheme: light)');

	// The terminal's colours. Background, foreground and cursor are the
	// CSS's --term-bg, --text and --accent of the same theme (a test checks
	// that they agree); the light one brings its own ANSI colours, readable
	// on a light background (xterm's defaults are made for a dark one).
	const XTERM = {
		dark: { background: '#0f1115', foreground: '#d7dae0', cursor: '#5aa9ff', selectionBackground: '#2d5a8a' },
		light: {
			background: '#fbfbfc',
			foreground: '#1f2328',
			cursor: '#0b62c4',
			cursorAccent: '#fbfbfc',
			selectionBackground: '#b6d4f5',
			black: '#24292f',
			red: '#c62633',
			green: '#116329',
			yellow: '#7a4d00',
			blue: '#0550ae',
			magenta: '#8250df',
			cyan: '#1b6b74',
			white: '#6e7781',
			brightBlack: '#57606a',
			brightRed: '#a40e26',
			brightGreen: '#1a7f37',
			brightYellow: '#633c01',
			brightBlue: '#0969da',
			brightMagenta: '#6639ba',
			brightCyan: '#0f5a63',
			brightWhite: '#8c959f',
		},
	};

	const read = () => {
		try {
			const v = window.localStorage.getItem(KEY);
			return CHOICES.includes(v) ? v : 'system';
		} catch {
			return 'system'; // storage disabled: the system's theme
		}
	};

	let choice = read();
	const effective = () => (choice === 'system' ? (prefersLight.matches ? 'light' : 'dark') : choice);
	let shown = effective();

	const syncSelects = () => {
		for (const s of document.querySelectorAll('[data-testid="theme-select"]')) s.value = choice;
	};

	const apply = () => {
		if (choice === 'system') delete root.dataset.theme;
		else root.dataset.theme = choice;
		syncSelects();
		const now = effective();
		shown = now;
		document.dispatchEvent(new CustomEvent('dashgate:theme', { detail: { theme: now, choice } }));
	};

	const set = (c) => {
		choice = CHOICES.includes(c) ? c : 'system';
		try {
			if (choice === 'system') window.localStorage.removeItem(KEY);
			else window.localStorage.setItem(KEY, choice);
		} catch {
			// storage disabled: the choice lasts for this page
		}
		apply();
	};

	window.dashgateTheme = Object.freeze({
		get choice() {
			return choice;
		},
		get theme() {
			return effective();
		},
		set,
		xterm: () => ({ ...XTERM[effective()] }),
	});

	if (choice !== 'system') root.dataset.theme = choice;

	prefersLight.addEventListener('change', () => {
		if (choice === 'system' && effective() !== shown) apply();
	});
	window.addEventListener('storage', (ev) => {
		if (ev.key !== KEY && ev.key !== null) return;
		choice = read();
		apply();
	});
	document.addEventListener('change', (ev) => {
		if (!(ev.target instanceof HTMLSelectElement) || ev.target.dataset.testid !== 'theme-select') return;
		set(ev.target.value);
		// The user's choice is kept for them on the server too (the
		// dashboard's settings.js stores it): unsaved until it is.
		try {
			window.localStorage.setItem(UNSAVED_KEY, choice);
		} catch {
			// storage disabled: the dashboard stores it now or not at all
		}
		document.dispatchEvent(new CustomEvent('dashgate:theme-chosen', { detail: { choice } }));
	});
	if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', syncSelects, { once: true });
	else syncSelects();
})();
