// Command probe computes the tasks of a spot check benchmark's plan (see
// package spotbench) with the backend of its build, the native worker's
// or, built for GOOS=js GOARCH=wasm and run under Node, the browser's,
// and writes each update to stdout as little-endian float32s, in the
// plan's order, skipping the tasks not listed in -only (a file of task
// ids, one a line) when it is given.
//
//	probe -dir PLANDIR -data MNISTDIR [-only FILE]
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/crowdtrain/crowdtrain/internal/spotbench"
)

func main() {
	dir := flag.String("dir", "", "the plan's folder (plan.json, snapshots)")
	data := flag.String("data", "", "the folder of the MNIST files")
	only := flag.String("only", "", "a file of the task ids to compute, one a line (default: all)")
	flag.Parse()
	if err := run(*dir, *data, *only); err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
}

func run(dir, data, only string) error {
	p, err := spotbench.Load(dir)
	if err != nil {
		return err
	}
	var want map[uint64]bool
	if only != "" {
		b, err := os.ReadFile(only)
		if err != nil {
			return err
		}
		want = map[uint64]bool{}
		for _, f := range strings.Fields(string(b)) {
			id, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				return fmt.Errorf("%s: %q is not a task id", only, f)
			}
			want[id] = true
		}
	}
	c, err := spotbench.NewComputer(dir, data, p, newBackend())
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(os.Stdout, 1<<20)
	for _, t := range p.Tasks {
		if want != nil && !want[t.ID] {
			continue
		}
		u, err := c.Compute(t)
		if err != nil {
			return fmt.Errorf("task %d: %w", t.ID, err)
		}
		if err := spotbench.WriteUpdate(w, u); err != nil {
			return err
		}
	}
	return w.Flush()
}
