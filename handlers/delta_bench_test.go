package handlers

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/store"
	"github.com/dashgate/dashgate/workers"
)

// benchDeltas is how many delta lines the delta worker streams for one
// prompt (BenchmarkDeltaPath's op).
const benchDeltas = 1000

// benchDeltaTexts are the texts the delta worker streams, in turn: a
// model's tokens, some of them with what JSON escapes (line breaks, tabs,
// quotes, <>&, non-ASCII that a worker may send as \u escapes).
var benchDeltaTexts = []string{" The", " quick", " brown", " fox", "\n\n", "```go", "\n", "func", " main", "()",
	" {", "\n\t", "fmt", ".Println", "(\"", "héllo", "\")", " <b>", " &", " “done”", "\n}", " 🙂", "."}

// benchReply is the reply the delta worker streams.
var benchReply = func() string {
	var b strings.Builder
	for i := range benchDeltas {
		b.WriteString(benchDeltaTexts[i%len(benchDeltaTexts)])
	}
	return b.String()
}()

// DeltaWorkerMain is the chat worker of BenchmarkDeltaPath (the test
// binary re-executed with DASHGATE_TEST_WORKER=deltas, see TestMain): it
// answers every prompt with benchDeltas delta lines, as fast as the pipe
// takes them, then its reply; any other request gets ok.
func DeltaWorkerMain() int {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 1<<20)
	out := bufio.NewWriterSize(os.Stdout, 64<<10)
	for in.Scan() {
		var req struct {
			ID     int64  `json:"id"`
			Method string `json:"method"`
		}
		if json.Unmarshal(in.Bytes(), &req) != nil {
			return 1
		}
		id := strconv.FormatInt(req.ID, 10)
		if req.Method == "prompt" {
			for i := range benchDeltas {
				// As a Go worker writes it (jsonl: a map, its keys sorted,
				// <>& and U+2028/9 escaped); every fifth line puts id
				// last and escapes non-ASCII, as ensure_ascii does.
				text := benchDeltaTexts[i%len(benchDeltaTexts)]
				var line []byte
				if i%5 == 4 {
					line = []byte(`{"event":"delta","text":` + asciiJSON(text) + `,"id":` + id + `}`)
				} else {
					line, _ = json.Marshal(map[string]any{"id": req.ID, "event": "delta", "text": text})
				}
				out.Write(line)
				out.WriteByte('\n')
			}
		}
		out.WriteString(`{"id":` + id + `,"ok":true,"result":{}}` + "\n")
		if out.Flush() != nil {
			return 1
		}
	}
	return 0
}

// asciiJSON is s as a JSON string of ASCII only (Python's json.dumps):
// every rune past ASCII a \u escape, a surrogate pair beyond the BMP.
func asciiJSON(s string) string {
	q, _ := json.Marshal(s)
	var b strings.Builder
	for _, r := range string(q) {
		switch {
		case r < utf8.RuneSelf:
			b.WriteRune(r)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

// benchDeltaViewer is one viewer of the session whose frames are encoded
// as the chat socket's writer encodes them (frameBytes), synchronously,
// and dropped.
type benchDeltaViewer struct {
	c        *chatConn
	deltas   int
	complete chan struct{}
}

func (v *benchDeltaViewer) Deliver(ev *sessions.Event) {
	if len(v.c.frameBytes(ev)) == 0 {
		panic("event " + ev.Type + " did not encode")
	}
	switch ev.Type {
	case "message.delta":
		v.deltas++
	case "message.complete":
		if ev.Payload.(map[string]any)["text"] != benchReply {
			panic("message.complete: not the text streamed")
		}
		v.complete <- struct{}{}
	}
}
func (v *benchDeltaViewer) Done() <-chan struct{}         { return nil }
func (v *benchDeltaViewer) Principal() sessions.Principal { return sessions.Principal{} }

// BenchmarkDeltaPath is a streamed reply end to end but for the socket:
// a real worker process (DeltaWorkerMain) writes benchDeltas delta lines
// for one prompt; the worker's stdout reader decodes them (workers), the
// turn relays each as message.delta and checkpoints the reply to the
// store (sessions), and the one viewer's writer encodes every event
// (frameBytes). One op is one turn: allocs/op over benchDeltas is the
// cost of a delta.
//
//	go test -run '^$' -bench DeltaPath -benchmem -memprofile mem.out ./handlers/
func BenchmarkDeltaPath(b *testing.B) {
	mgr := workers.NewManager(workers.Config{Grace: 2 * time.Second, Instance: "bench"})
	reg := sessions.New(sessions.Config{
		Spawner: sessions.ProcSpawner{
			Manager: mgr, WorkerCmd: []string{os.Args[0]}, PTYCmd: []string{"/bin/sh"},
			Env: []string{"DASHGATE_TEST_WORKER=deltas", "PATH=" + os.Getenv("PATH")},
		},
		Store:        store.NewMemory(),
		DetachedTTL:  time.Hour,
		AgentContext: 1, // no earlier conversation sent with a prompt: every op sends the same
	})
	b.Cleanup(func() {
		reg.Shutdown(context.Background())
		reg.Wait()
		mgr.CloseAll(workers.ReasonShutdown)
		mgr.Wait()
	})
	c := &chatConn{h: &Chat{}}
	c.h.defaults()
	v := &benchDeltaViewer{c: c, complete: make(chan struct{}, 1)}
	in, err := reg.Create(v, sessions.NewSession{Title: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	turn := func() {
		_, start, err := reg.Prompt(v, in.ID, "go")
		if err != nil {
			b.Fatal(err)
		}
		start()
		select {
		case <-v.complete:
		case <-time.After(30 * time.Second):
			b.Fatal("no message.complete in 30 s")
		}
	}
	turn() // the worker spawned
	v.deltas = 0
	for b.Loop() {
		turn()
	}
	if v.deltas != b.N*benchDeltas {
		b.Fatalf("%d deltas relayed in %d turns, want %d", v.deltas, b.N, b.N*benchDeltas)
	}
	b.ReportMetric(float64(benchDeltas), "deltas/op")
}
