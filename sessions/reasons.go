package sessions

import (
	"errors"
	"strconv"

	"github.com/dashgate/dashgate/workers"
)

// This file is the one table of dashgate's reasons (PROTOCOL.md §6): every
// session end reason, every worker close reason, and every translation
// between them and from the end of a socket. TestReasonTable fails when a
// reason is declared without a row here; the metrics start every label of
// these lists at zero, and their test fails when a label is missing.

// EndReason says why a session ended: the end_reason of its one
// "session closed" record and of the session.closed event.
type EndReason string

const (
	EndClientClose       EndReason = "client_close"        // session.close from a viewer
	EndCloseOnDisconnect EndReason = "close_on_disconnect" // its last viewer left and it asked to close then (or a terminal-only session's socket went)
	EndDetachedTTL       EndReason = "detached_ttl"        // detached for longer than --detached-ttl
	EndLRUEvict          EndReason = "lru_evict"           // the least recently active detached session, evicted at --max-sessions
	EndAdminReap         EndReason = "admin_reap"          // an administrator reaped it, or the program of its terminal-only session
	EndShutdown          EndReason = "shutdown"            // dashgate is shutting down
	EndPTYExit           EndReason = "pty_exit"            // the program of a terminal-only session ended by itself
	EndLeaseLost         EndReason = "lease_lost"          // another node claimed it: a write of it was refused (store.ErrFenced) or its lease was not renewed
)

// EndReasons lists every EndReason, for metrics and tests.
var EndReasons = []EndReason{
	EndClientClose, EndCloseOnDisconnect, EndDetachedTTL, EndLRUEvict, EndAdminReap, EndShutdown, EndPTYExit,
	EndLeaseLost,
}

// WorkerReasons lists every workers.Reason (declared in package workers,
// which imports nothing of the project), for metrics and tests. What each
// means:
//
//	detach            the session lost its last viewer (or a terminal socket closed without keepalive)
//	session_closed    the session ended (any end reason but shutdown)
//	admin_reap        an administrator reaped this child
//	exited            it ended by itself
//	timeout           a call got no reply within --worker-timeout; the worker was recycled
//	protocol_error    it wrote something that is not the worker protocol
//	shutdown          dashgate is shutting down
//	keepalive_expired a parked terminal waited --pty-keepalive for a reattach
//	superseded        a terminal socket was taken over (never a close reason of a process)
//	write_timeout     the viewer's socket stopped reading (or overflowed its send queue)
//	ping_timeout      the viewer's socket stopped answering pings
//	startup_sweep     a dead instance's leftover, ended at start
//	interrupted       it did not stop an interrupted turn within --interrupt-grace; recycled
//	spare_unused      a terminal started ahead of its session (--pty-spare) was ended unused
//	terminal_closed   one of a session's terminals, closed by its user (terminal.close); the session stays
//	reclaimed         an idle chat worker of a user over their fair share, closed at --max-workers so another could start (ReasonReclaimed)
var WorkerReasons = []workers.Reason{
	workers.ReasonDetach, workers.ReasonSessionClosed, workers.ReasonAdminReap, workers.ReasonExited,
	workers.ReasonTimeout, workers.ReasonProtocolError, workers.ReasonShutdown, workers.ReasonKeepaliveExpired,
	workers.ReasonSuperseded, workers.ReasonWriteTimeout, workers.ReasonPingTimeout, workers.ReasonStartupSweep,
	workers.ReasonInterrupted, workers.ReasonSpareUnused, workers.ReasonTerminalClosed, ReasonReclaimed,
}

// ReasonReclaimed is the worker reason of a chat worker the registry
// closed to free a slot of --max-workers for another spawn: an idle one
// (no turn, no pending approval, no command) of the user most over their
// fair share of the children (Registry.reclaimWorker). Its session stays,
// and its next call starts a new worker. It is declared here, not in
// package workers, because only the registry closes for it; its "worker
// closed" record also names for_user, whom it made room for.
const ReasonReclaimed workers.Reason = "reclaimed"

// childReason is the reason a session's worker and terminal close with when
// the session ends with r.
func childReason(r EndReason) workers.Reason {
	if r == EndShutdown {
		return workers.ReasonShutdown
	}
	return workers.ReasonSessionClosed
}

// terminalEndReason is the end reason of a terminal-only session whose
// terminal ended because its program closed with r.
func terminalEndReason(r workers.Reason) EndReason {
	switch r {
	case workers.ReasonExited:
		return EndPTYExit
	case workers.ReasonAdminReap:
		return EndAdminReap
	case workers.ReasonShutdown:
		return EndShutdown
	case workers.ReasonTerminalClosed: // its user closed it (terminal.close)
		return EndClientClose
	}
	return EndCloseOnDisconnect
}

// spawnRaceReason is the reason a worker closes with when its session
// detached (detached) or ended while it was being spawned.
func spawnRaceReason(detached bool) workers.Reason {
	if detached {
		return workers.ReasonDetach
	}
	return workers.ReasonSessionClosed
}

// Why a viewer's socket ended. A transport records the first of these as
// its socket's cause; ViewerEndReason turns it into the reason its sessions
// detach with.
var (
	ErrViewerWriteTimeout = errors.New("write timeout: the client stopped reading")
	ErrViewerSlow         = errors.New("slow consumer: the send queue overflowed")
	ErrViewerPingTimeout  = errors.New("ping timeout: the client stopped answering")
	ErrViewerShutdown     = errors.New("server shutting down")
	// ErrViewerRevoked: the socket's user was removed from (or changed in)
	// --users-file; its sessions detach as when the browser goes.
	ErrViewerRevoked = errors.New("access revoked: the user was removed")
)

// ViewerEndReason maps the cause of a socket's end to the reason the
// sessions it viewed detach with (and a non-parked terminal closes with):
// write_timeout, ping_timeout, shutdown, exited (the program ended:
// *ExitError), superseded (ErrTakenOver), else detach.
func ViewerEndReason(cause error) workers.Reason {
	var exit *ExitError
	switch {
	case errors.Is(cause, ErrViewerWriteTimeout), errors.Is(cause, ErrViewerSlow):
		return workers.ReasonWriteTimeout
	case errors.Is(cause, ErrViewerPingTimeout):
		return workers.ReasonPingTimeout
	case errors.Is(cause, ErrViewerShutdown):
		return workers.ReasonShutdown
	case errors.As(cause, &exit):
		return workers.ReasonExited
	case errors.Is(cause, ErrTakenOver):
		return workers.ReasonSuperseded
	}
	return workers.ReasonDetach
}

// endNotices is what a session's history says when it ends with a reason
// (a notice entry; a reopened conversation shows it). A suspended session
// (shutdown with a store that survives) gets none; nor does a
// terminal-only one, which has no history.
var endNotices = map[EndReason]string{
	EndClientClose:       "session closed",
	EndCloseOnDisconnect: "session closed when its last viewer left",
	EndDetachedTTL:       "session closed: it stayed detached past its time to live",
	EndLRUEvict:          "session closed to make room for newer sessions",
	EndAdminReap:         "session ended by an administrator",
	EndShutdown:          "session closed: dashgate shut down",
	EndPTYExit:           "session closed: its terminal program ended",
	EndLeaseLost:         "session closed: another dashgate instance took it over",
}

// workerNotice is what a session's history says when its worker went away
// on its own or was reaped (the worker.exited event): "worker exited, code
// 3", "worker exited, signal SIGKILL", "worker ended by an administrator",
// or "worker ended (<reason>)".
func workerNotice(res workers.CloseResult) string {
	switch {
	case res.Reason == workers.ReasonAdminReap:
		return "worker ended by an administrator"
	case res.Reason != workers.ReasonExited:
		return "worker ended (" + string(res.Reason) + ")"
	case res.Signal != "":
		return "worker exited, signal " + res.Signal
	}
	return "worker exited, code " + strconv.Itoa(res.ExitCode)
}

// terminalReapNotice is what a chat session's history says when an
// administrator ended its terminal.
const terminalReapNotice = "terminal ended by an administrator"
