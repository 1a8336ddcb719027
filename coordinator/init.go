package coordinator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"strings"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
)

// A job's `init` key (jobspec.Init): its version 0 is parameters read from
// a safetensors file or taken from another job, checked tensor by tensor
// against its model's layout, instead of model.Init from its seed. Only
// the parameters carry over; the optimizer's state starts fresh, as every
// new job's does.

// maxInitHeader is how many bytes beyond its tensors' an init file may
// hold: its header, whose metadata carries the source's whole spec (with
// a tokenizer of up to about 700 KB).
const maxInitHeader = 16 << 20

// resolveInit confines an init file named by a spec submitted over the
// API to the coordinator's data root, as its data files are.
func resolveInit(spec *jobspec.Spec, root string) error {
	in := spec.Init
	if in == nil || in.File == "" {
		return nil
	}
	p, err := dataset.ResolveFileUnder(root, "init", in.File, false)
	if err != nil {
		return specError(err, "init")
	}
	c := *in
	c.File = p
	spec.Init = &c
	return nil
}

// initParams returns the parameters spec.Init names for model (nil
// without init), and records in spec.Init where they came from: the
// file's SHA-256, or the version of the job's model taken. Every problem
// is a *jobspec.Error for the `init` key naming what is wrong: a missing,
// extra or mis-shaped tensor by name with both shapes, an unknown job.
func (s *Server) initParams(ctx context.Context, spec *jobspec.Spec, model *nn.Model) ([]float32, error) {
	if spec.Init == nil {
		return nil, nil
	}
	// A copy: specs are values, and one copied from this one must not
	// change with it.
	in := *spec.Init
	var src initSource
	var err error
	if in.Job != "" {
		src, err = s.paramsOfJob(ctx, in.Job, model)
		in.Job, in.Version = src.job, src.version
	} else {
		src, err = readPinnedInit(in, model)
		in.SHA256 = src.sum
	}
	if err == nil && spec.Kind == jobspec.KindRL && spec.Tokenizer == nil && src.spec != nil && src.spec.Tokenizer != nil && src.spec.Tokenizer.Data != "" {
		// An RL job reads its policy's tokens: it takes the policy's
		// tokenizer unless its spec names one (which must then be the
		// same, below).
		t := *src.spec.Tokenizer
		spec.Tokenizer = &t
	}
	if err == nil {
		err = checkSameTokenizer(*spec, src)
	}
	if err != nil {
		return nil, err
	}
	spec.Init = &in
	return src.params, nil
}

// initSource is what an init read: the parameters, and where they came
// from (the file's SHA-256, or the job and its version), with the
// source's spec where it is known (a job's, or an export's
// crowdtrain.spec).
type initSource struct {
	params  []float32
	sum     string
	job     string
	version int64
	spec    *jobspec.Spec
	from    string // for errors
}

// readPinnedInit reads in.File, and refuses it if in pins another SHA-256.
func readPinnedInit(in jobspec.Init, model *nn.Model) (initSource, error) {
	src, err := readInitFile(in.File, model)
	if err == nil && in.SHA256 != "" && src.sum != in.SHA256 {
		err = &jobspec.Error{Key: "init.sha256", Problem: fmt.Sprintf("%s has SHA-256 %s, not %s: it is another file than the one named (leave sha256 out to take it as it is)", in.File, src.sum, in.SHA256)}
	}
	return src, err
}

// checkSameTokenizer refuses parameters trained on other token ids than
// the job's: with another tokenizer of the same size every shape fits,
// but each embedding row stands for another token.
func checkSameTokenizer(spec jobspec.Spec, src initSource) error {
	if src.spec == nil || src.spec.Tokenizer == nil && spec.Tokenizer == nil {
		return nil
	}
	// An export's spec of a job from before tokenizers were stored has
	// no tokenizer data: nothing to compare.
	if t := src.spec.Tokenizer; t != nil && t.Data == "" {
		return nil
	}
	have, want := tokenizerKey(*src.spec), tokenizerKey(spec)
	if have == want {
		return nil
	}
	return &jobspec.Error{Key: "init", Problem: fmt.Sprintf("%s was trained on the token ids of %s, this job reads %s: every embedding row would stand for another token. Fix: give the job the source's tokenizer (its stored spec's tokenizer), or leave init out",
		src.from, src.spec.Tokenizer.Describe(), spec.Tokenizer.Describe())}
}

// reinit sets a resumed job that has no checkpoint (the coordinator
// stopped before its version 0 was saved) to the parameters its init
// names, as they were when it was created: a file whose SHA-256 differs
// from the one recorded is an error, not a silently different start. A
// job's model is taken as it is now (the version is logged).
func (s *Server) reinit(ctx context.Context, j *Job) error {
	params, in, now, err := s.readStart(ctx, j, "the job has no checkpoint to start from")
	if err != nil || params == nil {
		return err
	}
	if in.Job != "" && now.Version != in.Version {
		j.log.Warn(fmt.Sprintf("job %s: no checkpoint saved; starting again from job %s at version %d (it was created from version %d)", j.ID, now.Job, now.Version, in.Version))
	}
	copy(j.st.model.Params, params)
	return nil
}

// readStart reads again the parameters a job's init (an RL job's policy)
// names, as it was when the job was created: a file whose SHA-256
// differs from the one recorded is an error that says why it was read
// (because). It returns nil parameters for a job without either, and
// the init as recorded (in) and as read now (now).
func (s *Server) readStart(ctx context.Context, j *Job, because string) (params []float32, in, now *jobspec.Init, err error) {
	in = j.Spec.Init
	if in == nil {
		in = j.Spec.Policy // an RL job's starting parameters
	}
	if in == nil {
		return nil, nil, nil, nil
	}
	spec := j.Spec
	unpinned := *in
	unpinned.SHA256 = ""
	spec.Init = &unpinned
	if params, err = s.initParams(ctx, &spec, j.model); err != nil {
		return nil, nil, nil, err
	}
	now = spec.Init
	if in.File != "" && in.SHA256 != "" && now.SHA256 != in.SHA256 {
		return nil, nil, nil, &jobspec.Error{Key: "init", Problem: fmt.Sprintf("%s changed since the job was created (sha256 %s, now %s), and %s: put the file back, or delete the job", in.File, in.SHA256, now.SHA256, because)}
	}
	return params, in, now, nil
}

// CheckInitFile reads the file a spec's init names (none: nil) and checks
// it against the spec's model, as AddJob will: for `serve --job`, which
// refuses a file that does not fit before it opens its database.
func CheckInitFile(spec jobspec.Spec) error {
	if spec.Init == nil || spec.Init.File == "" {
		return nil
	}
	model, err := nn.NewModel(spec.Model)
	if err != nil {
		return &jobspec.Error{Key: "model", Problem: err.Error()}
	}
	src, err := readPinnedInit(*spec.Init, model)
	if err != nil {
		return err
	}
	return checkSameTokenizer(spec, src)
}

// readInitFile reads a safetensors file of model's parameters: a regular
// file (a FIFO is refused, not waited on) no larger than such a file can
// be, whose tensors are exactly the model's.
func readInitFile(path string, model *nn.Model) (initSource, error) {
	fail := func(problem string) (initSource, error) {
		return initSource{}, &jobspec.Error{Key: "init", Problem: problem}
	}
	f, err := dataset.OpenRegular(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fail(path + " does not exist. Fix: name a safetensors file crowdtrain export wrote")
		}
		return fail(err.Error() + ". Fix: name a safetensors file crowdtrain export wrote")
	}
	defer f.Close()
	limit := 8 + maxInitHeader + 4*int64(model.NumParams)
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return fail(fmt.Sprintf("reading %s: %v", path, err))
	}
	if int64(len(b)) > limit {
		return fail(fmt.Sprintf("%s is over %d bytes, more than a safetensors file of this model's %d parameters can be: it is another model's, or not safetensors", path, limit, model.NumParams))
	}
	tensors, meta, err := nn.ReadSafetensors(b)
	if err != nil {
		return fail(fmt.Sprintf("%s: %v", path, err))
	}
	params := make([]float32, model.NumParams)
	if err := model.ParamsFromSafetensors(tensors, params); err != nil {
		return fail(fmt.Sprintf("%s: %s", path, strings.TrimPrefix(err.Error(), "safetensors: ")))
	}
	if err := checkFinite(model, params, path); err != nil {
		return initSource{}, err
	}
	h := sha256.Sum256(b)
	src := initSource{params: params, sum: hex.EncodeToString(h[:]), from: path}
	// The tensors are all a file needs; an export's spec, when it
	// has one, also says which tokens it was trained on.
	var exported jobspec.Spec
	if js, ok := meta["crowdtrain.spec"]; ok && json.Unmarshal([]byte(js), &exported) == nil {
		src.spec = &exported
	}
	return src, nil
}

// paramsOfJob takes the current parameters of job id (a sweep's: its best
// trial's) for model.
func (s *Server) paramsOfJob(ctx context.Context, id string, model *nn.Model) (initSource, error) {
	fail := func(format string, args ...any) (initSource, error) {
		return initSource{}, &jobspec.Error{Key: "init.job", Problem: fmt.Sprintf(format, args...)}
	}
	if best, ok, err := s.bestOf(id); ok {
		if err != nil {
			return fail("%v", err)
		}
		id = best
	}
	src := s.job(id)
	if src == nil {
		return fail("no job %q on this coordinator (jobs: %s): name one GET /api/v1/jobs lists, or give the path of an exported safetensors file", id, jobIDsOf(s.jobList()))
	}
	params, version, err := src.currentParams(ctx)
	if err != nil {
		return fail("job %s: its model cannot be read: %v", id, err)
	}
	tensors := make([]nn.SafetensorsTensor, len(src.model.Layout))
	for i, t := range src.model.Layout {
		tensors[i] = nn.SafetensorsTensor{Name: t.Name, Shape: t.Shape, Data: params[t.Offset : t.Offset+t.Size]}
	}
	out := make([]float32, model.NumParams)
	if err := model.ParamsFromSafetensors(tensors, out); err != nil {
		msg := strings.TrimPrefix(err.Error(), "safetensors: ")
		return fail("job %s's model (%d parameters) is not this one's (%d): %s", id, src.model.NumParams, model.NumParams, msg)
	}
	from := fmt.Sprintf("job %s at version %d", id, version)
	if err := checkFinite(model, out, from); err != nil {
		return initSource{}, err
	}
	spec := src.Spec
	return initSource{params: out, job: id, version: version, spec: &spec, from: from}, nil
}

// jobIDsOf lists the jobs' ids, for an error.
func jobIDsOf(jobs []*Job) string {
	if len(jobs) == 0 {
		return "none"
	}
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return strings.Join(ids, ", ")
}

// checkFinite refuses parameters with a NaN or an infinity (a diverged
// job's), naming the tensor and the index in it: a job cannot train from
// them.
func checkFinite(model *nn.Model, params []float32, from string) error {
	for _, t := range model.Layout {
		for i, v := range params[t.Offset : t.Offset+t.Size] {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return &jobspec.Error{Key: "init", Problem: fmt.Sprintf("%s: tensor %q holds %v at index %d: a model cannot train from non-finite parameters", from, t.Name, v, i)}
			}
		}
	}
	return nil
}

// describeStart is where a job's version 0 came from, for its log line:
// its init, or an RL job's policy.
func describeStart(spec jobspec.Spec) string {
	if spec.Policy != nil {
		return "RL (task " + spec.RL.Task.Name + ") from the policy " + spec.Policy.Describe()
	}
	return describeInit(spec.Init)
}

// describeInit is where a job's version 0 came from, for its log line.
func describeInit(in *jobspec.Init) string {
	if in == nil {
		return "random init"
	}
	return "init from " + in.Describe()
}
