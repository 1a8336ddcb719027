// Command crowdtrain-load puts a crowd on a coordinator and measures what
// it costs there: N idle volunteers that stay connected and M active ones
// that each return a result every few seconds (package internal/loadgen),
// for a while, reporting every interval the lease latency the active ones
// saw and, when given the coordinator's process id and metrics URL, its
// resident memory and goroutines. `make bench-load` runs it
// (scripts/bench-load.sh); it is a process of its own because one process
// here may hold at most 20,000 descriptors.
//
//	crowdtrain-load --coordinator ws://127.0.0.1:8080/ws --idle 10000 --active 1000 \
//	    --every 10s --duration 10m --binds 100 --pid PID --metrics http://127.0.0.1:8080/metrics --token T
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/crowdtrain/crowdtrain/internal/loadgen"
)

func main() {
	coord := flag.String("coordinator", "ws://127.0.0.1:8080/ws", "the coordinator's websocket `URL`")
	idle := flag.Int("idle", 1000, "idle volunteers: connected, asking for nothing")
	active := flag.Int("active", 100, "active volunteers: each holds a lease and returns a result every --every")
	every := flag.Duration("every", 10*time.Second, "how long an active volunteer holds each lease")
	duration := flag.Duration("duration", time.Minute, "how long the load lasts once every volunteer has connected")
	ramp := flag.Duration("ramp", 20*time.Second, "how long connecting them takes")
	binds := flag.Int("binds", 0, "spread the connections over `N` local addresses 127.0.0.2.. (0: the system's choice)")
	interval := flag.Duration("report", 10*time.Second, "how often to report")
	pid := flag.Int("pid", 0, "the coordinator's process `ID`, to read its resident memory")
	metrics := flag.String("metrics", "", "the coordinator's /metrics `URL`, to read its goroutines")
	token := flag.String("token", "", "the coordinator's admin `TOKEN`, for --metrics")
	out := flag.String("json", "", "write every report as a JSON line to `FILE` too")
	flag.Parse()

	cfg := loadgen.Config{Coordinator: *coord, Idle: *idle, Active: *active, Every: *every, Ramp: *ramp, Logf: log.Printf}
	for i := range *binds {
		cfg.Binds = append(cfg.Binds, fmt.Sprintf("127.0.%d.%d", (i+2)/256, (i+2)%256))
	}
	load, err := loadgen.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	var jsonOut io.Writer = io.Discard
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		jsonOut = f
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { load.Run(runCtx); close(done) }()

	start := time.Now()
	var end time.Time // set once every volunteer is connected
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
		st := load.Stats()
		lat, lastErr := load.Window()
		r := report{
			Seconds: time.Since(start).Seconds(), Idle: st.IdleConnected, Active: st.ActiveConnected,
			Leases: st.Leases, Results: st.Results, Accepted: st.Accepted, Rejected: st.Rejected, SessionErrors: st.Errors,
			LeasesInWindow: len(lat), P50Ms: ms(loadgen.Quantile(lat, 0.5)), P99Ms: ms(loadgen.Quantile(lat, 0.99)),
			MaxMs: ms(loadgen.Quantile(lat, 1)),
		}
		if *pid > 0 {
			r.RSSBytes = rss(*pid)
		}
		if *metrics != "" {
			r.Goroutines = goroutines(*metrics, *token)
		}
		if end.IsZero() && st.IdleConnected+st.ActiveConnected >= int64(*idle+*active) {
			end = time.Now().Add(*duration)
			r.AllConnected = true
		}
		fmt.Printf("t=%4.0fs idle=%d active=%d leases=%d results=%d accepted=%d rejected=%v errors=%d lease p50=%.1fms p99=%.1fms max=%.1fms rss=%.1fMB goroutines=%d\n",
			r.Seconds, r.Idle, r.Active, r.Leases, r.Results, r.Accepted, r.Rejected, r.SessionErrors, r.P50Ms, r.P99Ms, r.MaxMs,
			float64(r.RSSBytes)/(1<<20), r.Goroutines)
		if lastErr != "" {
			fmt.Printf("    last session error: %s\n", lastErr)
		}
		b, _ := json.Marshal(r)
		fmt.Fprintf(jsonOut, "%s\n", b)
		if ctx.Err() != nil || (!end.IsZero() && time.Now().After(end)) {
			cancel()
			<-done
			return
		}
	}
}

// report is one interval's figures.
type report struct {
	Seconds        float64          `json:"seconds"`
	AllConnected   bool             `json:"all_connected,omitempty"` // the first report with every volunteer connected
	Idle           int64            `json:"idle"`
	Active         int64            `json:"active"`
	Leases         int64            `json:"leases"`
	Results        int64            `json:"results"`
	Accepted       int64            `json:"accepted"`
	Rejected       map[string]int64 `json:"rejected,omitempty"`
	SessionErrors  int64            `json:"session_errors"`
	LeasesInWindow int              `json:"leases_in_window"`
	P50Ms          float64          `json:"p50_ms"`
	P99Ms          float64          `json:"p99_ms"`
	MaxMs          float64          `json:"max_ms"`
	RSSBytes       int64            `json:"rss_bytes,omitempty"`
	Goroutines     int64            `json:"goroutines,omitempty"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// rss is a process's resident memory from /proc, 0 when unknown.
func rss(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// goroutines reads go_goroutines from a Prometheus text page, 0 when it
// cannot.
func goroutines(url, token string) int64 {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return int64(v)
		}
	}
	return 0
}
