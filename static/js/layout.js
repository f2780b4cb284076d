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
 * changed (the terminal refits). Returns {show(view)}: shows the chat or
 * the terminal ("chat" | "terminal"), as its tab does on a phone (the
 * keyboard shortcuts, shortcuts.js).
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
	return {
		show(view) {
			if (body.dataset.view !== view) setView(view, true);
		},
	};
}

// How near the end of the chat log (in pixels) still counts as at the end.
const END_SLACK = 40;

// How long after the reader's last wheel, touch or key a scroll is still
// theirs (ms): a smooth scroll runs on after its input.
const READER_SCROLL_MS = 1000;

/**
 * Keeps the chat log at its end while the reader is there, whatever
 * changes its size (the divider, the pending line, the window, a rewrap)
 * or its content; scrolled up, the reader stays where they are and the
 * "new messages" button (jump) shows once something new arrives at the
 * end, and takes them there.
 *
 * "At the end" is what the reader did last: a scroll of theirs (wheel,
 * touch, keys, the scrollbar) that ends near the end follows, one that
 * ends up from there stops following. Nothing else decides it: a size
 * change (a narrower log holds taller content: the end moved, the reader
 * did not), a clamp, or a scroll event dispatched a frame after the
 * layout that caused it has changed again.
 *
 * Returns {reveal(el), reset()}: reveal scrolls an element into view and
 * stops following (until the reader is back at the end); reset follows
 * again (a new conversation is shown).
 */
export function followLog(log, jump) {
	let follow = true;
	let pinned = 0; // scrollTop when the log was last known to be at its end
	let pinnedSize = ''; // its scrollHeight and clientHeight then
	const size = () => `${log.scrollHeight}x${log.clientHeight}`;
	const pin = () => {
		pinned = log.scrollTop;
		pinnedSize = size();
	};
	const atEnd = () => log.scrollHeight - log.scrollTop - log.clientHeight < END_SLACK;
	const setUnseen = (on) => {
		jump.hidden = !on;
	};
	const toEnd = () => {
		log.scrollTop = log.scrollHeight;
		pin();
	};
	// The reader's own scrolling: a pointer held on the log (its
	// scrollbar) or an input that scrolls, up to READER_SCROLL_MS ago
	// (a wheel's smooth scroll goes on after its event); or, for a
	// browser that tells no input (a scrollbar drag in Firefox, find in
	// page), a scroll while the log's sizes are those it was pinned at:
	// the layout moved nothing, so the reader did.
	let held = false;
	let inputAt = -Infinity;
	const touched = () => {
		inputAt = performance.now();
	};
	const byReader = () => held || performance.now() - inputAt < READER_SCROLL_MS;
	for (const type of ['wheel', 'touchmove', 'keydown']) log.addEventListener(type, touched, { passive: true });
	log.addEventListener('pointerdown', () => {
		held = true;
		touched();
	});
	for (const type of ['pointerup', 'pointercancel']) {
		window.addEventListener(type, () => {
			if (held) touched();
			held = false;
		});
	}
	// Following, but the reader moved up since (a scroll whose event has
	// not been dispatched yet): they left the end.
	const left = () => byReader() && log.scrollTop < pinned - 1 && !atEnd();
	// A scroll to the end follows; the reader's scroll up from the end
	// stops following. Anything else is the layout's doing: a follower is
	// kept at the end.
	log.addEventListener(
		'scroll',
		() => {
			if (atEnd()) {
				follow = true;
				pin();
				setUnseen(false);
			} else if (left() || (log.scrollTop < pinned - 1 && size() === pinnedSize)) {
				follow = false;
			} else if (follow) {
				toEnd();
			}
		},
		{ passive: true },
	);
	// The log has no scroll anchoring (app.css): a resize (the divider,
	// the pending line, the window) moves nothing, this keeps the end.
	new ResizeObserver(() => {
		if (follow && left()) follow = false;
		if (follow) toEnd();
	}).observe(log);
	new MutationObserver((records) => {
		if (follow && left()) follow = false;
		if (follow) {
			toEnd();
			return;
		}
		// Something new at the end: appended, or a change in the last
		// entry (a reply streaming). Older history put before is not new.
		const last = log.lastElementChild;
		const isNew = (r) => (r.target === log ? r.addedNodes.length > 0 && r.nextSibling === null : Boolean(last?.contains(r.target)));
		if (records.some(isNew)) setUnseen(true);
	}).observe(log, { childList: true, subtree: true, characterData: true });
	jump.addEventListener('click', () => {
		follow = true;
		toEnd();
		setUnseen(false);
	});
	return {
		reveal(el) {
			el.scrollIntoView({ block: 'center' });
			follow = atEnd();
			if (follow) pin();
		},
		reset() {
			follow = true;
			setUnseen(false);
			toEnd();
		},
	};
}
