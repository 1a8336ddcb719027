package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
)

func status(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	coord := fs.String("coordinator", "http://127.0.0.1:8080", "coordinator `URL`")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	base := strings.TrimRight(*coord, "/")
	base = strings.TrimSuffix(base, "/ws")
	if strings.HasPrefix(base, "ws") { // accept the worker URL too
		base = "http" + strings.TrimPrefix(base, "ws")
	}
	var jobs []coordinator.JobView
	if err := getJSON(ctx, base+"/api/v1/jobs", &jobs); err != nil {
		return err
	}
	var workers []coordinator.WorkerView
	if err := getJSON(ctx, base+"/api/v1/workers", &workers); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tNAME\tSTATE\tEPOCH\tVERSION\tEXAMPLES\tAPPLIED\tREJECTED\tWORKERS\tACCURACY\tCHECKPOINT")
	for _, j := range jobs {
		acc := "-"
		if j.Eval != nil {
			acc = fmt.Sprintf("%.4f @v%d", j.Eval.Accuracy, j.Eval.Version)
		}
		ckpt := "-"
		if c := j.LastCheckpoint; c != nil {
			ckpt = fmt.Sprintf("v%d, %s ago", c.Version, time.Since(c.At).Round(time.Second))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d%s\t%d\t%s\t%s\n", j.ID, j.Name, j.State, j.Epoch, j.Version,
			j.ExamplesSeen, j.UpdatesApplied, j.UpdatesRejected, formatRejections(j.Rejections), j.Workers, acc, ckpt)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "WORKER\tKIND\tBACKEND\tTHREADS\tJOB\tEXAMPLES\tACCEPTED\tREJECTED\tCONNECTED\tLAST SEEN")
	for _, w := range workers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%d\t%s ago\t%s ago\n", w.ID, w.Kind, w.Backend, w.Threads, w.Job,
			w.Examples, w.Accepted, w.Rejected, time.Since(w.ConnectedAt).Round(time.Second), time.Since(w.LastSeen).Round(time.Second))
	}
	if len(workers) == 0 {
		fmt.Fprintln(tw, "(no workers connected)")
	}
	return tw.Flush()
}

func formatRejections(r map[string]int64) string {
	var parts []string
	for _, k := range []string{"stale", "invalid", "unknown_lease", "not_running"} {
		if r[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, r[k]))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func getJSON(ctx context.Context, url string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return usagef("bad coordinator URL: %v", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the coordinator: %w (is `crowdtrain serve` running there?)", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: not a coordinator's answer: %w", url, err)
	}
	return nil
}
