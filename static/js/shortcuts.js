// Keyboard shortcuts of the dashboard, and the dialog that lists them
// (templates/dashboard.templ, data-testid="shortcuts-dialog").
//
//   Alt+Shift+N        a new session
//   Alt+Shift+↑ / ↓    the previous / next session of the list
//   Alt+Shift+C        focus the chat input
//   Alt+Shift+T        focus the terminal
//   Alt+Shift+F        search the terminal's scrollback
//   ?                  this list (not while typing: a text field or the terminal)
//   Esc                closes it
//
// Alt+Shift, because plain Alt+letter belongs to the shell (readline's
// M-c, M-t, M-n) and Alt+←/→ to the browser (back, forward); with Shift
// the shell only has the same words again (readline folds M-C to M-c) and
// Chromium and Firefox leave the page these keys. The chords work
// everywhere, the terminal included: that is how the keyboard leaves it
// (it keeps Tab for the shell). Keys are matched by ev.code, so a layout
// or macOS's Option characters do not change them.
//
// The listener is on window in the capture phase: it sees a chord before
// xterm.js (which cancels every key it handles) and the chat input's own
// keys, and stops it there.

const CHORDS = {
	KeyN: 'newSession',
	ArrowUp: 'previousSession',
	ArrowDown: 'nextSession',
	KeyC: 'focusChat',
	KeyT: 'focusTerminal',
	KeyF: 'searchTerminal',
};

/**
 * Wires the shortcuts. actions holds one function per name of CHORDS;
 * dialog is the <dialog> listing them, opener the button that opens it.
 */
export function initShortcuts(actions, dialog, opener) {
	const open = () => {
		if (!dialog.open) dialog.showModal();
	};
	opener.addEventListener('click', open);
	// Esc closes a modal <dialog> by itself (its cancel); its Close button too.
	dialog.addEventListener('click', (ev) => {
		if (ev.target instanceof Element && ev.target.closest('[data-testid="shortcuts-close"]')) dialog.close();
	});
	window.addEventListener(
		'keydown',
		(ev) => {
			// A held Alt+Shift+N makes one session, not one per repeat.
			if (ev.isComposing || (ev.repeat && ev.code === 'KeyN')) return;
			if (ev.altKey && ev.shiftKey && !ev.ctrlKey && !ev.metaKey && CHORDS[ev.code]) {
				ev.preventDefault();
				ev.stopPropagation();
				if (dialog.open) dialog.close();
				actions[CHORDS[ev.code]]();
				return;
			}
			if (ev.key === '?' && !ev.altKey && !ev.ctrlKey && !ev.metaKey && !typing(ev.target) && !dialog.open) {
				ev.preventDefault();
				open();
			}
		},
		true,
	);
}

/** Whether keys at el are text being typed: a text field, an editable element or the terminal. */
function typing(el) {
	if (!(el instanceof Element)) return false;
	if (el.closest('.xterm, [contenteditable=""], [contenteditable="true"]')) return true;
	if (el instanceof HTMLTextAreaElement || el instanceof HTMLSelectElement) return true;
	if (el instanceof HTMLInputElement) return !['button', 'checkbox', 'radio', 'submit', 'reset', 'range', 'color', 'file'].includes(el.type);
	return false;
}
