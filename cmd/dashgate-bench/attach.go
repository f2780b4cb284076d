package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// attach: a file of mib MiB attached in the chat (issue 42), on a fresh
// dashgate each run (its default store, SQLite in its state directory;
// the built-in echo worker): the upload's time (POST
// sessions/{id}/attachments until its 201, the bytes random), the time of
// the prompt that carries it (prompt.submit until message.complete: the
// bytes read back from the store and sent base64 to the worker, which
// answers with its notice), and dashgate's peak resident memory
// (/proc/<pid>/status VmHWM) before the upload, after it and after the
// prompt.
func attach(mib int) group {
	figs := []*Figure{
		fig(fmt.Sprintf("attach: upload of a %d MiB file, POST to 201", mib), "ms", ""),
		fig("  the prompt carrying it, prompt.submit to message.complete", "ms", ""),
		fig("dashgate peak RSS (VmHWM) before the upload", "MiB", ""),
		fig("  after the upload", "MiB", ""),
		fig("  after the prompt", "MiB", ""),
	}
	return group{name: "attach", figs: figs, fresh: true,
		args: []string{"--attach-max-bytes", fmt.Sprintf("%dMiB", mib), "--attach-max-total", fmt.Sprintf("%dMiB", mib)},
		run: func(ctx context.Context, t *target, r int) ([]float64, error) {
			ch, err := dialChat(ctx, t)
			if err != nil {
				return nil, err
			}
			defer ch.Close()
			sid, err := ch.CreateSession(ctx, "attach")
			if err != nil {
				return nil, err
			}
			if _, err := ch.Slash(ctx, sid, "/echo warm"); err != nil { // the worker runs: its spawn is not timed
				return nil, err
			}
			data := make([]byte, mib<<20)
			rand.Read(data)
			before, err := peakRSS(t.PID())
			if err != nil {
				return nil, err
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, t.URL("sessions/"+sid+"/attachments?name=bench.bin"), bytes.NewReader(data))
			req.Header.Set("Authorization", "Bearer "+t.Token)
			req.Header.Set("Content-Type", "application/octet-stream")
			t0 := time.Now()
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				return nil, err
			}
			var ref struct {
				ID string `json:"id"`
			}
			err = json.NewDecoder(res.Body).Decode(&ref)
			res.Body.Close()
			upload := time.Since(t0)
			if res.StatusCode != http.StatusCreated || err != nil {
				return nil, fmt.Errorf("upload: %s (%v)", res.Status, err)
			}
			afterUpload, err := peakRSS(t.PID())
			if err != nil {
				return nil, err
			}
			t0 = time.Now()
			if err := ch.Call(ctx, "prompt.submit", map[string]any{"session_id": sid, "text": "read it", "attachments": []string{ref.ID}}, nil); err != nil {
				return nil, err
			}
			ev, err := ch.WaitEvent(ctx, "message.complete", sid)
			if err != nil {
				return nil, err
			}
			prompt := time.Since(t0)
			if st, _ := ev.Payload()["status"].(string); st != "complete" {
				return nil, fmt.Errorf("the prompt ended %v", ev.Payload())
			}
			afterPrompt, err := peakRSS(t.PID())
			if err != nil {
				return nil, err
			}
			return []float64{ms([]time.Duration{upload})[0], ms([]time.Duration{prompt})[0], before, afterUpload, afterPrompt}, nil
		}}
}

// peakRSS is pid's peak resident set size (VmHWM), MiB.
func peakRSS(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmHWM", pid)
}
