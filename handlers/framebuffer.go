package handlers

import (
	"bufio"
	"net"
	"net/http"

	"github.com/dashgate/dashgate/sessions"
)

// frameHeaderMax is the most bytes a server frame's header takes (RFC
// 6455 §5.2: 2, a 64-bit length 8 more; a server never masks).
const frameHeaderMax = 10

// wholeFrames is a ResponseWriter whose connection, once hijacked (by
// websocket.Accept), writes through a buffer that holds a whole output
// frame, sessions.MaxFrame of payload and its header, and is kept in conn
// (for stop).
//
// coder/websocket writes a frame's header and then its payload through
// the hijacked connection's bufio.Writer, which net/http makes 4 KiB: a
// payload larger than the room left after the header went out as two
// write(2)s, the buffer's first 4 KiB then the rest, two TCP sends
// (BENCHMARKS.md, issue 43: a terminal's bulk output averaged 25 KiB a
// frame and 14.5 KiB a write). With the whole frame in the buffer, its
// Flush is the one write.
//
// Only the terminal's socket uses it: its frames are up to MaxFrame, and
// terminal sockets are few, while a chat socket's frames are small and
// there may be thousands of them. The buffer belongs to the connection and
// goes with it (never pooled: a write after the socket's end must not
// reach another connection's buffer).
type wholeFrames struct {
	http.ResponseWriter
	conn net.Conn // the hijacked connection, once Hijack returned
}

// Hijack hijacks the connection under w and gives it the larger writer.
// What net/http buffered of the request stays in the reader; its writer
// is empty after a hijack (the 101 was flushed), so nothing is lost by
// replacing it.
func (w *wholeFrames) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.conn = conn
	return conn, bufio.NewReadWriter(brw.Reader, bufio.NewWriterSize(conn, sessions.MaxFrame+frameHeaderMax)), nil
}

// Unwrap is the ResponseWriter under w, for http.ResponseController.
func (w *wholeFrames) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// stop closes the hijacked connection at once: a write blocked in it
// returns, whatever coder/websocket is doing (a close handshake in
// progress holds its writer for up to 5 s, and CloseNow then waits for
// it). Nothing before the hijack: nothing to close.
func (w *wholeFrames) stop() {
	if w.conn != nil {
		w.conn.Close()
	}
}
