package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/crowdtrain/crowdtrain/jobspec"
)

// submit sends a job spec (a file, or a built-in job's name) to a running
// coordinator, which validates it and starts the job.
func submit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newCLIFlags("submit", fmt.Sprintf("submit [flags] SPEC   (SPEC: a YAML or JSON job spec file, docs/JOBS.md, or a built-in job: %s)", strings.Join(jobspec.PresetNames(), ", ")))
	coord, token := apiFlags(fs.FlagSet, "")
	// SPEC may come before or after the flags.
	var rest []string
	if err := fs.parseMixed(ctx, args, stderr, &rest); err != nil {
		return err
	}
	if len(rest) != 1 {
		return usagef("give one SPEC: a job spec file or a built-in job (%v)", jobspec.PresetNames())
	}
	if *token == "" {
		return needsToken("submitting")
	}
	arg := rest[0]
	var req submitRequest
	if data, err := os.ReadFile(arg); err == nil {
		req.Spec = string(data)
	} else if slices.Contains(jobspec.PresetNames(), arg) {
		req.Preset = arg
	} else {
		return usagef("%s: %v (and it is not a built-in job: %v)", arg, err, jobspec.PresetNames())
	}
	c := apiClient{base: apiBase(*coord), token: *token}
	// A job or a sweep: a sweep's answer has kind "sweep" and its trials.
	var v struct {
		jobView
		Kind   string   `json:"kind"`
		Trials []string `json:"trials"`
	}
	if err := c.do(ctx, http.MethodPost, "/api/v1/jobs", req, &v); err != nil {
		return badRequestIsUsage(err) // a 400: the spec is wrong, and the message names the key
	}
	if v.Kind == "sweep" {
		fmt.Fprintf(stdout, "submitted sweep %s (%s): %s, %d trials: %s\n", v.ID, v.Name, v.State, len(v.Trials), strings.Join(v.Trials, ", "))
		return nil
	}
	fmt.Fprintf(stdout, "submitted %s (%s): %s, %d parameters, %d shards\n", v.ID, v.Name, v.State, v.NumParams, v.Shards)
	return nil
}
