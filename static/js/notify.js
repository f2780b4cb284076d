// Tells a person who is elsewhere that the dashboard waits for them: an
// approval asked for, or a reply finished, while the tab is hidden.
//
//  - The tab's title counts them, "(2) dashgate", until the tab is visible
//    again (always on: it needs no permission).
//  - A system notification (the Notification API) too, once the person
//    turned it on with the "Notify" button of the top bar
//    (data-testid="notify-toggle", aria-pressed). The browser's permission
//    is asked for on that click, never on load. A click on a notification
//    brings the tab to the front. While the browser blocks notifications
//    for the site, the button says so ("Notify: blocked", data-state
//    "blocked"; its title says where to allow them), as soon as the
//    permission changes.
//
// localStorage key:
//   dashgate.notify  "on" when notifications are wanted (and were allowed)

const NOTIFY_KEY = 'dashgate.notify';

export class Notifier {
	#title;
	#count = 0;
	#button;
	#shown = []; // notifications the browser showed, oldest first (window.dashgate.notifications, for tests)

	/** @param {HTMLButtonElement} button the top bar's toggle */
	constructor(button) {
		this.#title = document.title;
		this.#button = button;
		document.addEventListener('visibilitychange', () => {
			if (document.visibilityState === 'visible') this.#reset();
		});
		if (!('Notification' in window)) {
			button.hidden = true; // the title count still works
			return;
		}
		button.hidden = false;
		button.addEventListener('click', () => this.#toggle());
		navigator.permissions?.query({ name: 'notifications' }).then(
			(status) => status.addEventListener('change', () => this.#render()),
			() => {}, // no Permissions API: a click still renders
		);
		this.#render();
	}

	/** Whether system notifications are on (wanted and allowed). */
	get enabled() {
		return 'Notification' in window && Notification.permission === 'granted' && localStorage.getItem(NOTIFY_KEY) === 'on';
	}

	/** What was shown, for tests: [{title, body}]. */
	shown() {
		return this.#shown.map((n) => ({ ...n }));
	}

	/** An approval of the current session waits (command: what it would run). */
	approval(command) {
		this.#note('An approval is waiting', command ? `Run: ${command}` : 'The agent asks before it goes on.');
	}

	/** A reply of the current session finished (text: its end). */
	replied(text, interrupted) {
		this.#note(interrupted ? 'The reply was interrupted' : 'The reply is ready', String(text ?? '').slice(0, 160));
	}

	#note(title, body) {
		if (document.visibilityState !== 'hidden') return;
		this.#count++;
		document.title = `(${this.#count}) ${this.#title}`;
		if (!this.enabled) return;
		try {
			const n = new Notification(title, { body, tag: 'dashgate' });
			n.addEventListener('click', () => {
				window.focus();
				n.close();
			});
			// Recorded once the browser showed it (not when it refused).
			n.addEventListener('show', () => this.#shown.push({ title, body }));
		} catch (err) {
			console.warn('dashgate: notification', err);
		}
	}

	#reset() {
		this.#count = 0;
		document.title = this.#title;
	}

	async #toggle() {
		if (this.enabled) {
			localStorage.removeItem(NOTIFY_KEY);
		} else if (Notification.permission === 'granted') {
			localStorage.setItem(NOTIFY_KEY, 'on');
		} else if (Notification.permission === 'default') {
			const p = await Notification.requestPermission();
			if (p === 'granted') localStorage.setItem(NOTIFY_KEY, 'on');
		}
		this.#render();
	}

	#render() {
		const b = this.#button;
		const on = this.enabled;
		const blocked = Notification.permission === 'denied';
		b.setAttribute('aria-pressed', String(on));
		b.dataset.state = blocked ? 'blocked' : on ? 'on' : 'off';
		b.textContent = blocked ? 'Notify: blocked' : 'Notify';
		b.title = blocked
			? 'Notifications are blocked for this site in the browser’s settings (the icon left of the address); the tab’s title still counts what waits'
			: on
				? 'Notifications are on when an approval waits or a reply finishes in a hidden tab; click to turn them off'
				: 'Turn on notifications when an approval waits or a reply finishes in a hidden tab';
	}
}
