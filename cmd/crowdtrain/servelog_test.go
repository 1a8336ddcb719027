//go:build cgo

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// serve --log-format json: every line is a JSON record, the job's lines
// carry its id, and a worker's join carries the worker, its volunteer
// and the job it was placed on.
func TestServeLogsJSONWithJobAndWorker(t *testing.T) {
	testenv.Long(t, "runs serve with a local worker that trains")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--db", "", "--local-workers", "1", "--log-format", "json"},
			&bytes.Buffer{}, &stderr)
	}()
	var job, joined map[string]any
	deadline := time.Now().Add(time.Minute)
	for joined == nil && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		job, joined = nil, nil
		for l := range strings.SplitSeq(strings.TrimSpace(stderr.String()), "\n") {
			if l == "" {
				continue
			}
			var rec map[string]any
			if err := json.Unmarshal([]byte(l), &rec); err != nil {
				t.Fatalf("not a JSON record (%v): %q", err, l)
			}
			msg, _ := rec["msg"].(string)
			switch {
			case strings.Contains(msg, "parameters,") && job == nil:
				job = rec
			case strings.Contains(msg, " joined (job "):
				joined = rec
			}
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exited %d:\n%s", code, stderr.String())
	}
	if job == nil || joined == nil {
		t.Fatalf("no job-created or no joined record within a minute:\n%s", stderr.String())
	}
	id, _ := job["job"].(string)
	if id == "" || joined["job"] != id || joined["level"] != "INFO" {
		t.Errorf("job record %v, joined record %v: want both to carry the job's id", job, joined)
	}
	if w, _ := joined["worker"].(string); !strings.Contains(joined["msg"].(string), "worker "+w+" joined") || w == "" {
		t.Errorf("joined record's worker attribute %q is not the worker its message names: %v", w, joined)
	}
	if v, _ := joined["volunteer"].(string); v == "" {
		t.Errorf("joined record names no volunteer: %v", joined)
	}
}
