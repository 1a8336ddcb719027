package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/protocol"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// crowdtrainBinary builds this command once per test run: the tests below
// kill it the way an operator's machine would, so it must be a process.
func crowdtrainBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "crowdtrain-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "crowdtrain")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// proc is a crowdtrain process whose log the test can wait on.
type proc struct {
	t    *testing.T
	cmd  *exec.Cmd
	mu   sync.Mutex
	log  []string
	seen chan string // every line, for waitLine
	done chan error
}

func startProc(t *testing.T, args ...string) *proc {
	t.Helper()
	return startCmd(t, exec.Command(crowdtrainBinary(t), args...))
}

// startCmd starts cmd (another build of crowdtrain, or one under an
// emulator) as a proc.
func startCmd(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	p := &proc{t: t, cmd: cmd, seen: make(chan string, 4096), done: make(chan error, 1)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			p.mu.Lock()
			p.log = append(p.log, sc.Text())
			p.mu.Unlock()
			select {
			case p.seen <- sc.Text():
			default:
			}
		}
	}()
	go func() { p.done <- cmd.Wait(); pw.Close() }()
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *proc) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.log, "\n")
}

func (p *proc) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
		}
	}
}

// waitLine waits for a log line containing substr.
func (p *proc) waitLine(substr string, timeout time.Duration) string {
	p.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l := <-p.seen:
			if strings.Contains(l, substr) {
				return l
			}
		case <-deadline:
			p.t.Fatalf("no log line with %q within %v; log:\n%s", substr, timeout, p.logText())
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func getJobs(addr string) ([]coordinator.JobView, error) {
	resp, err := http.Get("http://" + addr + "/api/v1/jobs")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var jobs []coordinator.JobView
	return jobs, json.NewDecoder(resp.Body).Decode(&jobs)
}

// waitJob polls the API until cond holds for the only job.
func waitJob(t *testing.T, addr string, timeout time.Duration, what string, cond func(coordinator.JobView) bool) coordinator.JobView {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last coordinator.JobView
	for time.Now().Before(deadline) {
		if jobs, err := getJobs(addr); err == nil && len(jobs) == 1 {
			last = jobs[0]
			if cond(last) {
				return last
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s; job: %+v", what, last)
	return last
}

// snapshotOfFirstLease joins as a raw worker, takes one lease and returns
// its base version and the snapshot bytes it names, then says bye.
func snapshotOfFirstLease(t *testing.T, addr string) (int64, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	send := func(m protocol.Message) {
		b, _ := protocol.Encode(m)
		if err := c.Write(ctx, websocket.MessageBinary, b); err != nil {
			t.Fatal(err)
		}
	}
	send(&protocol.Hello{Protocol: protocol.Version, Kind: protocol.KindNative, Backend: "probe", Threads: 1})
	send(&protocol.Want{N: 1})
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m, err := protocol.Decode(b, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if l, ok := m.(*protocol.Lease); ok && l.Snapshot == protocol.SnapshotLatest {
			send(&protocol.Start{LeaseID: l.ID}) // the base is fixed now: wait for started
			continue
		}
		base, url := int64(-1), ""
		switch m := m.(type) {
		case *protocol.Lease:
			base, url = m.BaseVersion, m.SnapshotURL
		case *protocol.Started:
			base, url = m.BaseVersion, m.SnapshotURL
		}
		if url != "" {
			resp, err := http.Get("http://" + addr + url)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %s", url, resp.Status)
			}
			send(&protocol.Bye{Reason: "probe done"})
			return base, body
		}
	}
}
