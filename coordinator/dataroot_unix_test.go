//go:build linux || darwin

package coordinator_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
)

// A FIFO, a device (through a symlink) and a file whose load never ends,
// named by submitted specs, block no other submission: the FIFO and the
// device are refused at once without being opened, the slow load after
// the data load timeout, each a 400 naming the key, the path and what is
// wrong; meanwhile another job is accepted at once.
func TestBadDataPathsBlockNoOtherSubmission(t *testing.T) {
	root := t.TempDir()
	fifo := filepath.Join(root, "pipe")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	zero := filepath.Join(root, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	slow := filepath.Join(root, "slow")
	if err := os.WriteFile(slow, []byte("not read"), 0o644); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	const timeout = 400 * time.Millisecond
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) {
		c.DataRoot = "/" // so that /dev/zero is inside it: only its kind refuses it
		c.DataLoadTimeout = timeout
		c.LoadData = func(d dataset.Spec, o dataset.Options) (*dataset.Set, *dataset.Set, error) {
			if d.TrainImages == slow {
				close(entered)
				<-release // a reader stuck on a hung file system
			}
			return dataset.Load(d, o)
		}
	})
	spec := func(name, img string) map[string]string {
		return map[string]string{"spec": `{"name": "` + name + `", "model": "mnist-mlp", "target_accuracy": 1, "eval_every": 1000000,
			"dataset": {"type": "idx", "train_images": "` + img + `", "train_labels": "` + slow + `", "test_images": "` + slow + `", "test_labels": "` + slow + `"}}`}
	}
	post := func(body any) (int, string) {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(http.MethodPost, g.http.URL+"/api/v1/jobs", bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+testAdminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	type answer struct {
		code int
		body string
		took time.Duration
	}
	slowDone := make(chan answer, 1)
	go func() {
		start := time.Now()
		code, body := post(spec("slow", slow))
		slowDone <- answer{code, body, time.Since(start)}
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow spec's load never started")
	}

	for _, c := range []struct{ path, what string }{{fifo, "named pipe (FIFO)"}, {zero, "character device"}} {
		start := time.Now()
		code, body := post(spec("bad", c.path))
		took := time.Since(start)
		var e struct{ Key, Error string }
		json.Unmarshal([]byte(body), &e)
		if code != http.StatusBadRequest || e.Key != "dataset.train_images" || !strings.Contains(e.Error, c.what) ||
			!strings.Contains(e.Error, "not a regular file") {
			t.Errorf("a spec naming %s: %d %s; want 400 for dataset.train_images saying it is a %s", c.path, code, body, c.what)
		}
		if took > timeout/2 {
			t.Errorf("refusing %s took %v while the slow load held on; want at once", c.path, took)
		}
	}
	start := time.Now()
	code, body := post(map[string]string{"spec": `{"name": "other", "model": "mnist-mlp", "target_accuracy": 1, "eval_every": 1000000}`})
	if code != http.StatusCreated {
		t.Fatalf("another job while the slow load held on: %d %s", code, body)
	}
	if took := time.Since(start); took > timeout/2 {
		t.Errorf("another job waited %v behind the slow load", took)
	}

	a := <-slowDone
	var e struct{ Key, Error string }
	json.Unmarshal([]byte(a.body), &e)
	if a.code != http.StatusBadRequest || e.Key != "dataset" || !strings.Contains(e.Error, "did not finish in "+timeout.String()) ||
		!strings.Contains(e.Error, slow) || !strings.Contains(e.Error, "--data-load-timeout") {
		t.Errorf("the slow spec: %d %s; want 400 for dataset naming %s and the %v limit", a.code, a.body, slow, timeout)
	}
	if a.took < timeout || a.took > 10*timeout {
		t.Errorf("the slow spec was answered after %v; want about the %v timeout", a.took, timeout)
	}
	var jobs []coordinator.JobView
	if g.getJSON("/api/v1/jobs", &jobs); len(jobs) != 2 {
		t.Fatalf("%d jobs, want 2: the first and the other, none of the refused", len(jobs))
	}
}
