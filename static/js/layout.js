// The dashboard's layout controls: the collapsible sessions sidebar, the
// draggable divider between chat and terminal, and the chat / terminal tabs
// of the phone layout (static/css/app.css, "Layout").
//
// State lives on <body>:
//   data-sidebar="open|closed"   the sessions pane (the toggle in the top bar)
//   data-view="chat|terminal"    which pane the phone layout shows (tabs)
//   --chat-size                  the chat's share of chat + terminal (0.2..0.8),
//   --chat-fr / --term-fr        the same as grid track sizes
//
// localStorage keys:
//   dashgate.sidebar  "open" | "closed" (absent: open, closed on a phone)
//   dashgate.split    the chat's share, a number
//   dashgate.view     "chat" | "terminal"

const SIDEBAR_KEY = 'dashgate.sidebar';
const SPLIT_KEY = 'dashgate.split';
const VIEW_KEY = 'dashgate.view';
const PHONE = window.matchMedia('(max-width: 700px)');
const STACKED = window.matchMedia('(max-width: 1000px)');
const MIN_SPLIT = 0.2;
const MAX_SPLIT = 0.8;

const byTestId = (id) => document.querySelector(`[data-testid="${id}"]`);

/**
 * Wires the layout controls. onView is called after the visible pane
 * changed (the terminal refits).
 */
export function initLayout(onView) {
	const body = document.body;
	const toggle = byTestId('sidebar-toggle');
	const divider = byTestId('divider');
	const layout = byTestId('layout');

	const setSidebar = (open, remember) => {
		body.dataset.sidebar = open ? 'open' : 'closed';
		toggle.setAttribute('aria-expanded', String(open));
		if (remember) localStorage.setItem(SIDEBAR_KEY, open ? 'open' : 'closed');
		onView();
	};
	const stored = localStorage.getItem(SIDEBAR_KEY);
	// A phone starts with the sidebar closed: it would cover the chat.
	setSidebar(PHONE.matches ? false : stored !== 'closed', false);
	toggle.addEventListener('click', () => setSidebar(body.dataset.sidebar !== 'open', true));
	// On a phone the open sidebar covers the page: choosing a session closes it.
	byTestId('sessions-pane').addEventListener('click', (ev) => {
		if (PHONE.matches && ev.target instanceof Element && ev.target.closest('[data-testid="session-item"], [data-testid="closed-session"], [data-testid="search-hit"], [data-testid="new-session"]')) {
			setSidebar(false, false);
		}
	});
	PHONE.addEventListener('change', () => setSidebar(PHONE.matches ? false : localStorage.getItem(SIDEBAR_KEY) !== 'closed', false));

	const setView = (view, remember) => {
		body.dataset.view = view;
		for (const b of document.querySelectorAll('.view-tab')) b.setAttribute('aria-pressed', String(b.dataset.view === view));
		if (remember) localStorage.setItem(VIEW_KEY, view);
		onView();
	};
	setView(localStorage.getItem(VIEW_KEY) === 'terminal' ? 'terminal' : 'chat', false);
	byTestId('view-tabs').addEventListener('click', (ev) => {
		const b = ev.target instanceof Element ? ev.target.closest('.view-tab') : null;
		if (b) setView(b.dataset.view, true);
	});

	const setSplit = (f, remember) => {
		const v = Math.min(MAX_SPLIT, Math.max(MIN_SPLIT, f));
		body.style.setProperty('--chat-size', String(v));
		body.style.setProperty('--chat-fr', `${Math.round(v * 1000)}fr`);
		body.style.setProperty('--term-fr', `${1000 - Math.round(v * 1000)}fr`);
		divider.setAttribute('aria-valuenow', String(Math.round(v * 100)));
		if (remember) localStorage.setItem(SPLIT_KEY, String(v));
		onView();
	};
	const saved = Number(localStorage.getItem(SPLIT_KEY));
	if (saved >= MIN_SPLIT && saved <= MAX_SPLIT) setSplit(saved, false);
	divider.setAttribute('aria-valuemin', String(MIN_SPLIT * 100));
	divider.setAttribute('aria-valuemax', String(MAX_SPLIT * 100));

	// The share of the chat at a pointer position: across the chat and
	// terminal panes, horizontally side by side, vertically when stacked.
	const shareAt = (ev) => {
		const chat = byTestId('chat-log').closest('.pane').getBoundingClientRect();
		const term = byTestId('terminal').closest('.pane').getBoundingClientRect();
		if (STACKED.matches) return (ev.clientY - chat.top) / (term.bottom - chat.top);
		return (ev.clientX - chat.left) / (term.right - chat.left);
	};
	// The chat's share as laid out now (before any drag: the CSS default).
	const shareNow = () => {
		const chat = byTestId('chat-log').closest('.pane').getBoundingClientRect();
		const term = byTestId('terminal').closest('.pane').getBoundingClientRect();
		return STACKED.matches ? chat.height / (chat.height + term.height) : chat.width / (chat.width + term.width);
	};
	divider.addEventListener('pointerdown', (ev) => {
		ev.preventDefault();
		divider.setPointerCapture(ev.pointerId);
		layout.classList.add('dragging');
		const move = (e) => setSplit(shareAt(e), false);
		const up = (e) => {
			divider.removeEventListener('pointermove', move);
			divider.removeEventListener('pointerup', up);
			divider.removeEventListener('pointercancel', up);
			layout.classList.remove('dragging');
			setSplit(shareAt(e), true);
		};
		divider.addEventListener('pointermove', move);
		divider.addEventListener('pointerup', up);
		divider.addEventListener('pointercancel', up);
	});
	// Keyboard: arrows move the divider by 5%.
	divider.addEventListener('keydown', (ev) => {
		const cur = Number(body.style.getPropertyValue('--chat-size')) || shareNow();
		const back = ev.key === 'ArrowLeft' || ev.key === 'ArrowUp';
		const fwd = ev.key === 'ArrowRight' || ev.key === 'ArrowDown';
		if (!back && !fwd) return;
		ev.preventDefault();
		setSplit(cur + (fwd ? 0.05 : -0.05), true);
	});
	if (!divider.hasAttribute('aria-valuenow')) divider.setAttribute('aria-valuenow', String(Math.round(shareNow() * 100)));
	STACKED.addEventListener('change', () => divider.setAttribute('aria-orientation', STACKED.matches ? 'horizontal' : 'vertical'));
	divider.setAttribute('aria-orientation', STACKED.matches ? 'horizontal' : 'vertical');
}
