//go:build cgo

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/store"
)

func export(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newCLIFlags("export", "export --db FILE --job ID [--version V] [--format safetensors|onnx] --out FILE")
	dbPath := fs.String("db", "crowdtrain.db", "the coordinator's SQLite `FILE`")
	jobID := fs.String("job", "", "job `ID` (crowdtrain status lists them)")
	version := fs.Int64("version", -1, "checkpoint `V` to export (default: the latest)")
	format := fs.String("format", "", "the file `FORMAT`: safetensors (the tensors, for PyTorch) or onnx (the network, for ONNX Runtime); default: onnx for an --out ending in .onnx, else safetensors")
	out := fs.String("out", "", "`FILE` to write")
	if err := fs.parse(ctx, args, stderr); err != nil {
		return err
	}
	if *jobID == "" || *out == "" {
		return usagef("--job and --out are required")
	}
	switch {
	case *format == "" && strings.EqualFold(filepath.Ext(*out), ".onnx"):
		*format = coordinator.FormatONNX
	case *format == "":
		*format = coordinator.FormatSafetensors
	case !slices.Contains(coordinator.ExportFormats, *format):
		return usagef("--format %s: want %s", *format, strings.Join(coordinator.ExportFormats, " or "))
	}
	// store.Open creates a missing database; exporting from one is a typo.
	if _, err := os.Stat(*dbPath); err != nil {
		return usagef("no database at %s: pass the --db the coordinator was started with", *dbPath)
	}
	// Reading never upgrades: serve may be running an older version on it.
	db, err := store.OpenNoUpgrade(*dbPath)
	if err != nil {
		if errors.Is(err, store.ErrNewerSchema) || errors.Is(err, store.ErrOlderSchema) {
			return &usageError{err.Error()}
		}
		return err
	}
	defer db.Close()

	// Write beside the target and rename, so a failed export never leaves
	// a truncated model behind.
	tmp, err := os.CreateTemp(filepath.Dir(*out), ".export-*."+*format)
	if err != nil {
		return fmt.Errorf("cannot write next to %s: %w", *out, err)
	}
	defer os.Remove(tmp.Name())
	info, err := coordinator.Export(ctx, db, *jobID, *version, *format, tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), *out); err != nil {
		return err
	}
	acc := ""
	if info.Eval != nil {
		acc = fmt.Sprintf(", test accuracy %.4f", info.Eval.Accuracy)
	}
	fmt.Fprintf(stdout, "wrote %s (%s): job %s version %d, %d tensors, %d parameters%s\n",
		*out, *format, info.JobID, info.Version, info.Tensors, info.NumParams, acc)
	return nil
}
