package agent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkFirstDelta: one prompt through Run, from its request line to
// its first delta line, against a model server in the process.
func BenchmarkFirstDelta(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"first\"}}]}\n\n")
		w.(http.Flusher).Flush()
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	defer srv.Close()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() { done <- Run(ctx, Config{LLMURL: srv.URL + "/v1", Model: "m"}, inR, outW, io.Discard) }()
	r := bufio.NewReader(outR)
	i := 0
	for b.Loop() {
		i++
		fmt.Fprintf(inW, `{"id":%d,"method":"prompt","params":{"text":"hi","turn_id":"t","history":[],"model":""}}`+"\n", i)
		for first := true; ; {
			line, err := r.ReadString('\n')
			if err != nil {
				b.Fatal(err)
			}
			if first && strings.Contains(line, `"delta"`) {
				first = false
			}
			if strings.Contains(line, `"ok"`) {
				break
			}
		}
	}
	inW.Close()
	cancel()
	drained := make(chan struct{})
	go func() { io.Copy(io.Discard, outR); close(drained) }()
	<-done
	outW.Close()
	<-drained
}
