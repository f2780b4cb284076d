// The texts of the notice entries the server keeps in a session's history
// (sessions/reasons.go), made from the live events, so that a notice shown
// live reads exactly as it does after a reload.

const END_NOTICES = {
	client_close: 'session closed',
	close_on_disconnect: 'session closed when its last viewer left',
	detached_ttl: 'session closed: it stayed detached past its time to live',
	lru_evict: 'session closed to make room for newer sessions',
	admin_reap: 'session ended by an administrator',
	shutdown: 'session closed: dashgate shut down',
	pty_exit: 'session closed: its terminal program ended',
};

/** The notice of a session.closed event's end_reason. */
export function endNotice(reason) {
	return END_NOTICES[reason] ?? `session closed (${reason ?? 'unknown'})`;
}

/**
 * The notice of a worker.exited event: "worker exited, code 3", "worker
 * exited, signal SIGKILL", "worker ended by an administrator" or "worker
 * ended (<reason>)".
 */
export function workerNotice(p) {
	if (p.reason === 'admin_reap') return 'worker ended by an administrator';
	if (p.reason !== 'exited') return `worker ended (${p.reason ?? 'unknown'})`;
	if (p.signal) return `worker exited, signal ${p.signal}`;
	return `worker exited, code ${p.exit_code ?? 0}`;
}

// The short words of an end_reason in the Closed list.
const END_LABELS = {
	client_close: 'closed',
	close_on_disconnect: 'closed when left',
	detached_ttl: 'expired',
	lru_evict: 'evicted',
	admin_reap: 'ended by an admin',
	shutdown: 'dashgate stopped',
	pty_exit: 'terminal ended',
};

/** The label of a closed session's end_reason (never the raw word). */
export function endLabel(reason) {
	return END_LABELS[reason] ?? 'closed';
}

// What the dashboard says while dashgate does not answer: the same words
// whether it was stopped or is restarting, since the page cannot tell.
export const DISCONNECTED = 'disconnected, retrying';

/** The text of the connection banner for a chat socket status (rpc.js) or "restarting". */
export function connectionText(status) {
	return status === 'reconnecting' || status === 'restarting' ? DISCONNECTED : status;
}

/** Said when Send is pressed while the chat socket is down: the text stays in the box. */
export const NOT_SENT = 'Not connected: nothing was sent. The text stays in the box; press Send again once connected.';
