package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"
)

// The operator's controls (jobs, tokens, volunteers): each a call of the
// admin API (docs/API.md, docs/VOLUNTEERS.md), read through the client's
// own views (apiview.go), so the worker build has them too.

const jobsUsage = `crowdtrain jobs list [--json]     (public, as the API's GET /api/v1/jobs)
crowdtrain jobs show ID          (public)
crowdtrain jobs pause|resume|stop ID
crowdtrain jobs patch ID KEY=VALUE...   (lr, max_staleness, weight, priority, mode and its keys: docs/JOBS.md)
each with [--coordinator URL] [--token T | --token-file FILE]`

const tokensUsage = `crowdtrain tokens issue NAME
crowdtrain tokens list [--json]
each with [--coordinator URL] [--token T | --token-file FILE]`

const volunteersUsage = `crowdtrain volunteers list [--json]
crowdtrain volunteers ban ID [--reason TEXT]
crowdtrain volunteers pardon ID
each with [--coordinator URL] [--token T | --token-file FILE]`

// controlCmd is one parsed control command: its API client, --json and
// its positional arguments.
type controlCmd struct {
	c      apiClient
	asJSON bool
	args   []string
}

// parseControl parses a control's flags, which may come before, between
// or after its arguments (`jobs pause ID --coordinator URL`). extra adds
// the subcommand's own flags.
func parseControl(ctx context.Context, name, usage string, args []string, stderr io.Writer, json bool, extra func(*flag.FlagSet)) (*controlCmd, error) {
	fs := newCLIFlags(name, strings.ReplaceAll(strings.TrimPrefix(usage, "crowdtrain "), "\n", "\n       "))
	coord, token := apiFlags(fs.FlagSet, "")
	var asJSON *bool
	if json {
		asJSON = fs.Bool("json", false, "print the API's JSON answer instead of a table")
	}
	if extra != nil {
		extra(fs.FlagSet)
	}
	var pos []string
	if err := fs.parseMixed(ctx, args, stderr, &pos); err != nil {
		return nil, err
	}
	cmd := &controlCmd{c: apiClient{base: apiBase(*coord), token: *token}, args: pos}
	if asJSON != nil {
		cmd.asJSON = *asJSON
	}
	return cmd, nil
}

// wantArgs checks the count of positional arguments.
func (cmd *controlCmd) wantArgs(n int, what string) error {
	if len(cmd.args) != n {
		if n == 0 {
			return usagef("unexpected arguments %q", cmd.args)
		}
		return usagef("want %s, got %q", what, cmd.args)
	}
	return nil
}

// subcommand splits off a control's subcommand, or answers its usage.
func subcommand(name, usage string, args []string, stdout io.Writer) (string, []string, error) {
	if len(args) == 0 {
		return "", nil, usagef("which one?\n%s", usage)
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, usage)
		return "", nil, flag.ErrHelp
	}
	return args[0], args[1:], nil
}

// printJSON writes an API answer indented, as the API sent it.
func printJSON(w io.Writer, raw json.RawMessage) error {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return err
	}
	b.WriteByte('\n')
	_, err := w.Write(b.Bytes())
	return err
}

// jobPath is the API path of job id.
func jobPath(id string) string { return "/api/v1/jobs/" + url.PathEscape(id) }

func jobsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	sub, args, err := subcommand("jobs", jobsUsage, args, stdout)
	if err != nil {
		return err
	}
	cmd, err := parseControl(ctx, "jobs "+sub, jobsUsage, args, stderr, sub == "list", nil)
	if err != nil {
		return err
	}
	if sub != "list" && sub != "show" && cmd.c.token == "" { // the jobs are public, their controls the operator's
		return needsToken("jobs " + sub)
	}
	switch sub {
	case "list":
		if err := cmd.wantArgs(0, ""); err != nil {
			return err
		}
		var raw json.RawMessage
		if err := cmd.c.do(ctx, http.MethodGet, "/api/v1/jobs", nil, &raw); err != nil {
			return err
		}
		if cmd.asJSON {
			return printJSON(stdout, raw)
		}
		var jobs []jobView
		if err := json.Unmarshal(raw, &jobs); err != nil {
			return fmt.Errorf("GET /api/v1/jobs: not a coordinator's answer: %w", err)
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "JOB\tNAME\tSTATE\tMODE\tEPOCH\tVERSION\tEXAMPLES\tWORKERS\tACCURACY")
		for _, j := range jobs {
			acc := "-"
			if j.Eval != nil {
				acc = fmt.Sprintf("%.4f @v%d", j.Eval.Accuracy, j.Eval.Version)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", j.ID, j.Name, j.State, j.Mode, j.Epoch, j.Version, j.ExamplesSeen, j.Workers, acc)
		}
		if len(jobs) == 0 {
			fmt.Fprintln(tw, "(no jobs)")
		}
		return tw.Flush()
	case "show":
		if err := cmd.wantArgs(1, "one job ID"); err != nil {
			return err
		}
		var raw json.RawMessage
		if err := cmd.c.do(ctx, http.MethodGet, jobPath(cmd.args[0]), nil, &raw); err != nil {
			return err
		}
		return printJSON(stdout, raw)
	case "pause", "resume", "stop":
		if err := cmd.wantArgs(1, "one job ID"); err != nil {
			return err
		}
		var j jobView
		if err := cmd.c.do(ctx, http.MethodPost, jobPath(cmd.args[0])+"/"+sub, nil, &j); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "job %s (%s): %s at version %d\n", j.ID, j.Name, j.State, j.Version)
		return nil
	case "patch":
		if len(cmd.args) < 2 {
			return usagef("want a job ID and at least one KEY=VALUE, got %q", cmd.args)
		}
		body, err := patchBody(cmd.args[1:])
		if err != nil {
			return err
		}
		var j jobView
		if err := cmd.c.do(ctx, http.MethodPatch, jobPath(cmd.args[0]), body, &j); err != nil {
			return badRequestIsUsage(err)
		}
		fmt.Fprintf(stdout, "job %s (%s): patched; mode %s, lr %g, max_staleness %d, weight %g, priority %d\n",
			j.ID, j.Name, j.Mode, j.LR, j.MaxStaleness, j.Weight, j.Priority)
		return nil
	default:
		return usagef("unknown jobs command %q\n%s", sub, jobsUsage)
	}
}

// patchBody turns KEY=VALUE arguments into PATCH's JSON object: a value
// that reads as JSON (a number, true, false, null, an object) is sent as
// that, anything else as a string (mode=diloco).
func patchBody(kvs []string) (map[string]any, error) {
	body := map[string]any{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("%q is not KEY=VALUE (for example lr=0.001 or mode=diloco)", kv)
		}
		if _, dup := body[k]; dup {
			return nil, usagef("%s is given twice", k)
		}
		var val any
		if json.Unmarshal([]byte(v), &val) == nil {
			body[k] = json.RawMessage(v)
		} else {
			body[k] = v
		}
	}
	return body, nil
}

func tokensCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	sub, args, err := subcommand("tokens", tokensUsage, args, stdout)
	if err != nil {
		return err
	}
	cmd, err := parseControl(ctx, "tokens "+sub, tokensUsage, args, stderr, sub == "list", nil)
	if err != nil {
		return err
	}
	if cmd.c.token == "" {
		return needsToken("tokens " + sub)
	}
	switch sub {
	case "issue":
		if err := cmd.wantArgs(1, "one volunteer NAME"); err != nil {
			return err
		}
		var t issuedToken
		if err := cmd.c.do(ctx, http.MethodPost, "/api/v1/tokens", tokenRequest{Name: cmd.args[0]}, &t); err != nil {
			return badRequestIsUsage(err)
		}
		fmt.Fprintf(stderr, "join token %s for %q (shown this once; give it to the volunteer for `crowdtrain work --join-token`):\n", t.ID, t.Name)
		fmt.Fprintln(stdout, t.Token)
		return nil
	case "list":
		if err := cmd.wantArgs(0, ""); err != nil {
			return err
		}
		var raw json.RawMessage
		if err := cmd.c.do(ctx, http.MethodGet, "/api/v1/tokens", nil, &raw); err != nil {
			return err
		}
		if cmd.asJSON {
			return printJSON(stdout, raw)
		}
		var list struct {
			Tokens []tokenView `json:"tokens"`
		}
		if err := json.Unmarshal(raw, &list); err != nil {
			return fmt.Errorf("GET /api/v1/tokens: not a coordinator's answer: %w", err)
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TOKEN\tNAME\tCREATED\tREVOKED")
		for _, t := range list.Tokens {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%v\n", t.ID, t.Name, t.CreatedAt.UTC().Format(time.RFC3339), t.Revoked)
		}
		if len(list.Tokens) == 0 {
			fmt.Fprintln(tw, "(no join tokens)")
		}
		return tw.Flush()
	default:
		return usagef("unknown tokens command %q\n%s", sub, tokensUsage)
	}
}

func volunteersCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	sub, args, err := subcommand("volunteers", volunteersUsage, args, stdout)
	if err != nil {
		return err
	}
	var reason *string
	cmd, err := parseControl(ctx, "volunteers "+sub, volunteersUsage, args, stderr, sub == "list", func(fs *flag.FlagSet) {
		if sub == "ban" {
			reason = fs.String("reason", "", "why, at most 200 bytes on one line (default \"banned by the operator\")")
		}
	})
	if err != nil {
		return err
	}
	if cmd.c.token == "" {
		return needsToken("volunteers " + sub)
	}
	switch sub {
	case "list":
		if err := cmd.wantArgs(0, ""); err != nil {
			return err
		}
		var raw json.RawMessage
		if err := cmd.c.do(ctx, http.MethodGet, "/api/v1/volunteers/standing", nil, &raw); err != nil {
			return err
		}
		if cmd.asJSON {
			return printJSON(stdout, raw)
		}
		var list struct {
			Volunteers []volunteerView `json:"volunteers"`
		}
		if err := json.Unmarshal(raw, &list); err != nil {
			return fmt.Errorf("GET /api/v1/volunteers/standing: not a coordinator's answer: %w", err)
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "VOLUNTEER\tNAME\tTOKEN\tEXAMPLES\tSTRIKES\tCONNECTED\tBANNED\tLAST SEEN")
		for _, v := range list.Volunteers {
			banned := "-"
			if v.Banned {
				banned = fmt.Sprintf("yes: %q", v.BanReason)
			}
			tok := v.TokenName
			if tok == "" {
				tok = "-"
			}
			fmt.Fprintf(tw, "%s\t%q\t%s\t%d\t%d\t%d\t%s\t%s ago\n", v.ID, v.Name, tok, v.Examples, v.Strikes, v.Connected, banned,
				time.Since(v.LastSeen).Round(time.Second))
		}
		if len(list.Volunteers) == 0 {
			fmt.Fprintln(tw, "(no volunteers yet)")
		}
		return tw.Flush()
	case "ban", "pardon":
		if err := cmd.wantArgs(1, "one volunteer ID (volunteers list shows them)"); err != nil {
			return err
		}
		var body any
		if sub == "ban" {
			body = banRequest{Reason: *reason}
		}
		var v volunteerView
		if err := cmd.c.do(ctx, http.MethodPost, "/api/v1/volunteers/"+url.PathEscape(cmd.args[0])+"/"+sub, body, &v); err != nil {
			return badRequestIsUsage(err)
		}
		if v.Banned {
			fmt.Fprintf(stdout, "volunteer %s (%q) banned: %q\n", v.ID, v.Name, v.BanReason)
		} else {
			fmt.Fprintf(stdout, "volunteer %s (%q) pardoned\n", v.ID, v.Name)
		}
		return nil
	default:
		return usagef("unknown volunteers command %q\n%s", sub, volunteersUsage)
	}
}
