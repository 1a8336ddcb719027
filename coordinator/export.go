package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/nn/onnx"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/store"
)

// ExportInfo describes an exported model.
type ExportInfo struct {
	JobID     string
	Version   int64
	Tensors   int
	NumParams int
	Eval      *EvalResult // the evaluation of exactly this version, if the job recorded one
}

// Export formats.
const (
	// FormatSafetensors is one F32 tensor per entry of the model's layout,
	// named and shaped as nn lays them out (PyTorch's conventions), and the
	// job's spec in the metadata: for PyTorch and for resuming training.
	FormatSafetensors = "safetensors"
	// FormatONNX is the network itself, ready to run: an ONNX model (opset
	// 17) whose initializers are the same tensors (package nn/onnx).
	FormatONNX = "onnx"
)

// ExportFormats are the formats Export writes.
var ExportFormats = []string{FormatSafetensors, FormatONNX}

// Export writes a checkpoint of a job in format (FormatSafetensors or
// FormatONNX). version < 0 means the latest checkpoint. Both formats carry
// ExportMetadata (safetensors' "__metadata__", ONNX's metadata_props).
func Export(ctx context.Context, db *store.Store, jobID string, version int64, format string, w io.Writer) (ExportInfo, error) {
	if format != FormatSafetensors && format != FormatONNX {
		return ExportInfo{}, fmt.Errorf("no export format %q (formats: %s)", format, strings.Join(ExportFormats, ", "))
	}
	rec, err := db.Job(ctx, jobID)
	if errors.Is(err, store.ErrNotFound) {
		return ExportInfo{}, fmt.Errorf("no job %q in %s (jobs: %s)", jobID, db.Path(), jobIDs(ctx, db))
	}
	if err != nil {
		return ExportInfo{}, err
	}
	var sr sweepRecord
	if json.Unmarshal(rec.Spec, &sr) == nil && sr.SweepRecord != 0 {
		// A sweep exports its best trial.
		if sr.Best == nil {
			return ExportInfo{}, fmt.Errorf("sweep %s has no scored trial yet: export it after its first rung, or export a trial by its id", jobID)
		}
		return Export(ctx, db, sr.Best.ID, version, format, w)
	}
	var spec jobspec.Spec
	if err := json.Unmarshal(rec.Spec, &spec); err != nil {
		return ExportInfo{}, fmt.Errorf("job %s: spec: %w", jobID, err)
	}
	model, err := nn.NewModel(spec.Model)
	if err != nil {
		return ExportInfo{}, fmt.Errorf("job %s: model: %w", jobID, err)
	}
	var c store.Checkpoint
	if version < 0 {
		c, err = db.LatestCheckpoint(ctx, jobID)
	} else {
		c, err = db.Checkpoint(ctx, jobID, version)
	}
	if errors.Is(err, store.ErrNotFound) {
		return ExportInfo{}, fmt.Errorf("job %s has no checkpoint%s (kept: %s)", jobID, versionText(version), checkpointVersions(ctx, db, jobID))
	}
	if err != nil {
		return ExportInfo{}, err
	}
	params := make([]float32, model.NumParams)
	if err := protocol.DecodeFloatsInto(params, c.Params); err != nil {
		return ExportInfo{}, fmt.Errorf("job %s checkpoint v%d: %w", jobID, c.Version, err)
	}
	info := ExportInfo{JobID: jobID, Version: c.Version, Tensors: len(model.Layout), NumParams: model.NumParams}
	var p progress
	if json.Unmarshal(c.Progress, &p) == nil && p.Eval != nil && p.Eval.Version == c.Version {
		info.Eval = p.Eval
	}
	meta := ExportMetadata(jobID, spec, c.Version, "crowdtrain export")
	if e := info.Eval; e != nil {
		meta["crowdtrain.test_accuracy"] = strconv.FormatFloat(e.Accuracy, 'f', -1, 64)
		if !math.IsNaN(e.Loss) && !math.IsInf(e.Loss, 0) {
			meta["crowdtrain.test_loss"] = strconv.FormatFloat(e.Loss, 'f', -1, 64)
		}
	}
	if format == FormatONNX {
		err = onnx.Write(w, model, params, meta)
	} else {
		err = nn.WriteSafetensors(w, model.Layout, params, meta)
	}
	if err != nil {
		return ExportInfo{}, fmt.Errorf("job %s checkpoint v%d: %w", jobID, c.Version, err)
	}
	return info, nil
}

// ExportMetadata is the "__metadata__" of an exported model: PyTorch's
// "format": "pt", the job's id, name and version, "crowdtrain.model" (the
// model spec as JSON, all a reader needs to rebuild the architecture:
// scripts/torch_reference.py does) and "crowdtrain.spec" (the whole job
// spec as JSON: its optimizer, batch size and data).
func ExportMetadata(jobID string, spec jobspec.Spec, version int64, exported string) map[string]string {
	modelJSON, _ := json.Marshal(spec.Model)
	specJSON, _ := json.Marshal(spec)
	return map[string]string{
		"format":              "pt",
		"crowdtrain.job":      jobID,
		"crowdtrain.name":     spec.Name,
		"crowdtrain.version":  strconv.FormatInt(version, 10),
		"crowdtrain.model":    string(modelJSON),
		"crowdtrain.spec":     string(specJSON),
		"crowdtrain.exported": exported,
	}
}

func versionText(v int64) string {
	if v < 0 {
		return ""
	}
	return " at version " + strconv.FormatInt(v, 10)
}

func jobIDs(ctx context.Context, db *store.Store) string {
	recs, err := db.Jobs(ctx)
	if err != nil || len(recs) == 0 {
		return "none"
	}
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	return strings.Join(ids, ", ")
}

func checkpointVersions(ctx context.Context, db *store.Store, jobID string) string {
	cs, err := db.Checkpoints(ctx, jobID)
	if err != nil || len(cs) == 0 {
		return "none"
	}
	vs := make([]string, len(cs))
	for i, c := range cs {
		vs[i] = strconv.FormatInt(c.Version, 10)
	}
	return strings.Join(vs, ", ")
}
