package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

func status(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newCLIFlags("status", "status [--coordinator URL] [--token T | --token-file FILE] [--json]")
	coord, token := apiFlags(fs.FlagSet, "; without it the workers are not listed")
	asJSON := fs.Bool("json", false, "print {\"jobs\": [...], \"workers\": [...]} as the API answers them (workers: null without the token)")
	if err := fs.parse(ctx, args, stderr); err != nil {
		return err
	}
	c := apiClient{base: apiBase(*coord), token: *token}
	if *asJSON {
		var out struct {
			Jobs    json.RawMessage `json:"jobs"`
			Workers json.RawMessage `json:"workers"`
		}
		if err := c.do(ctx, http.MethodGet, "/api/v1/jobs", nil, &out.Jobs); err != nil {
			return err
		}
		out.Workers = json.RawMessage("null")
		if c.token != "" {
			if err := c.do(ctx, http.MethodGet, "/api/v1/workers", nil, &out.Workers); err != nil {
				return err
			}
		}
		raw, err := json.Marshal(out)
		if err != nil {
			return err
		}
		return printJSON(stdout, raw)
	}
	var jobs []jobView
	if err := c.do(ctx, http.MethodGet, "/api/v1/jobs", nil, &jobs); err != nil {
		return err
	}
	var workers []workerView
	workersErr := error(nil)
	if c.token == "" {
		workersErr = errors.New("workers are shown to the operator only: pass --token or set $" + adminTokenEnv)
	} else {
		workersErr = c.do(ctx, http.MethodGet, "/api/v1/workers", nil, &workers)
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
		if f := j.CheckpointFailure; f != nil {
			ckpt += fmt.Sprintf("; v%d NOT WRITTEN (%d failures in %s): %s", f.Version, f.Failures,
				time.Since(f.PendingSince).Round(time.Second), f.LastError)
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
	switch {
	case workersErr != nil:
		fmt.Fprintf(tw, "(%v)\n", workersErr)
	case len(workers) == 0:
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

// adminTokenEnv names the variable that holds the admin token for serve,
// status and submit.
const adminTokenEnv = "CROWDTRAIN_ADMIN_TOKEN"

// apiFlags adds --coordinator and --token to fs, for the commands that
// call the coordinator's API; tokenNote is added to the token's help.
func apiFlags(fs *flag.FlagSet, tokenNote string) (coord, token *string) {
	coord = fs.String("coordinator", "http://127.0.0.1:8080", "coordinator `URL`")
	token = fs.String("token", os.Getenv(adminTokenEnv), "admin `TOKEN` (default $"+adminTokenEnv+")"+tokenNote)
	// A file keeps the token out of the process list and shell history.
	fs.Func("token-file", "read the admin token from `FILE` (its first line; instead of --token)", func(path string) error {
		raw, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("cannot read the admin token: %w", err)
		}
		line, _, _ := strings.Cut(string(raw), "\n")
		if *token = strings.TrimSpace(line); *token == "" {
			return fmt.Errorf("%s: the first line is empty; it should hold the admin token", path)
		}
		return nil
	})
	return coord, token
}

// needsToken is the usage error of a command run without the admin token;
// doing says what needs it ("submitting").
func needsToken(doing string) error {
	return usagef("%s needs the admin token: pass --token or set $%s (serve prints its token at start)", doing, adminTokenEnv)
}

// badRequestIsUsage turns the API's 400, a bad value that its message
// names, into a usage error (exit status 2), as a bad flag is.
func badRequestIsUsage(err error) error {
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusBadRequest {
		return usagef("%s", ae.Message)
	}
	return err
}

// apiBase turns what a user may pass as --coordinator (the page's URL, the
// worker's ws:// URL) into the API's base URL.
func apiBase(coord string) string {
	base := strings.TrimRight(coord, "/")
	base = strings.TrimSuffix(base, "/ws")
	if strings.HasPrefix(base, "ws") {
		base = "http" + strings.TrimPrefix(base, "ws")
	}
	return base
}

// apiClient calls the coordinator's JSON API, with the admin token when it
// has one.
type apiClient struct {
	base, token string
}

// apiError is an error answer of the API.
type apiError struct {
	Status  int
	Message string `json:"error"`
	Key     string `json:"key"`
}

func (e *apiError) Error() string { return e.Message }

func (c apiClient) do(ctx context.Context, method, path string, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return usagef("bad coordinator URL: %v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the coordinator: %w (is `crowdtrain serve` running there?)", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		return fmt.Errorf("%s %s: the coordinator refused the admin token: pass --token or set $%s (serve prints its token at start)", method, path, adminTokenEnv)
	}
	if resp.StatusCode >= 300 {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		e := &apiError{Status: resp.StatusCode}
		if json.Unmarshal(raw, e) != nil || e.Message == "" {
			e.Message = fmt.Sprintf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(raw)))
		}
		return e
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: not a coordinator's answer: %w", method, path, err)
	}
	return nil
}
