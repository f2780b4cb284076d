// Small helpers shared by the chat and terminal sockets.

// Reconnect delays: 250 ms, doubling up to 5 s; reset() after a success.
export const BACKOFF_MIN_MS = 250;
export const BACKOFF_MAX_MS = 5000;

export class Backoff {
	#next = BACKOFF_MIN_MS;

	/** Returns the delay to wait before the next attempt and doubles it. */
	next() {
		const d = this.#next;
		this.#next = Math.min(this.#next * 2, BACKOFF_MAX_MS);
		return d;
	}

	reset() {
		this.#next = BACKOFF_MIN_MS;
	}
}

/** Maps a WebSocket (or null) to "connecting" | "open" | "closing" | "closed". */
export function socketState(ws) {
	if (!ws) return 'closed';
	return ['connecting', 'open', 'closing', 'closed'][ws.readyState] ?? 'closed';
}

/** Builds ws(s)://host{base}{path} from the page location. */
export function wsURL(base, path) {
	const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
	return scheme + '//' + location.host + base + path;
}
