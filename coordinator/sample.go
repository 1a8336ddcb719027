package coordinator

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"github.com/crowdtrain/crowdtrain/nn"
)

// Text generation from a text job's current model. It costs the
// coordinator CPU, so it is an admin call, and bounded: at most
// MaxSampleTokens tokens, at most sampleTime of generating, one sample at a
// time per job.
const (
	MaxSampleTokens     = 2048
	DefaultSampleTokens = 200
	DefaultTemperature  = 0.8
	maxPromptBytes      = 4096
	maxTemperature      = 100
	sampleTime          = 20 * time.Second
	// sampleWait is how long a request waits for the sample being
	// generated (by another request or an evaluation) before a 429.
	sampleWait = 5 * time.Second
	// sampleChunk is how many tokens are generated between checks of
	// the time bound.
	sampleChunk = 16
	// evalSampleTokens is the length of the sample an evaluation of a
	// text job shows.
	evalSampleTokens = 160
)

// SampleRequest is the body of POST /api/v1/jobs/{id}/sample.
type SampleRequest struct {
	Prompt string `json:"prompt"`
	// Tokens to generate: default DefaultSampleTokens, at most
	// MaxSampleTokens.
	Tokens int `json:"tokens,omitempty"`
	// Temperature: default DefaultTemperature; 0 takes the most likely
	// token each time.
	Temperature *float64 `json:"temperature,omitempty"`
	// Seed makes the sample repeatable at one model version; 0 draws one.
	Seed uint64 `json:"seed,omitempty"`
}

// Sample is a generated text.
type Sample struct {
	JobID       string  `json:"job"`
	Version     int64   `json:"version"`
	Prompt      string  `json:"prompt"`
	Text        string  `json:"text"` // the generated continuation only
	Tokens      int     `json:"tokens"`
	Temperature float64 `json:"temperature"`
	Seed        uint64  `json:"seed"`
	// Truncated is set when the time bound ended generation early.
	Truncated bool    `json:"truncated,omitempty"`
	Millis    float64 `json:"ms"`
}

// isTextModel reports whether m is a language model: input [t] token ids
// (bytes, for a text job) and a prediction at every position, what
// nn.Model.Generate needs.
func isTextModel(m *nn.Model) bool {
	return len(m.Spec.Input) == 1 && m.LabelsPerExample == m.InputSize
}

// generate continues prompt on params, in chunks, until tokens are made
// or deadline passes. It returns the tokens and whether it stopped short.
func generate(m *nn.Model, params []float32, prompt []int32, tokens int, temperature float64, rng *rand.Rand, deadline time.Time) ([]int32, bool, error) {
	ws := m.NewWorkspace(1)
	ctx := append([]int32(nil), prompt...)
	out := make([]int32, 0, tokens)
	for len(out) < tokens {
		if time.Now().After(deadline) {
			return out, true, nil
		}
		// Only the last InputSize tokens are ever fed.
		if len(ctx) > m.InputSize {
			ctx = append(ctx[:0], ctx[len(ctx)-m.InputSize:]...)
		}
		got, err := m.Generate(ws, params, ctx, min(sampleChunk, tokens-len(out)), temperature, rng)
		if err != nil {
			return nil, false, err
		}
		out = append(out, got...)
		ctx = append(ctx, got...)
	}
	return out, false, nil
}

// lockWithin takes mu if it comes free within wait (an evaluation's sample
// takes a moment), or reports false.
func lockWithin(ctx context.Context, mu *sync.Mutex, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for !mu.TryLock() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// encodeText is a prompt as the job's tokens: its tokenizer's ids, or its
// bytes.
func (j *Job) encodeText(b []byte) []int32 {
	if j.tok != nil {
		return j.tok.Encode(b)
	}
	t := make([]int32, len(b))
	for i, c := range b {
		t[i] = int32(c)
	}
	return t
}

// decodeTokens is generated tokens as text. The model only makes ids
// below its vocabulary, which for a tokenized job is the tokenizer's
// (PrepareTokenizer checked), so decoding cannot fail; an id that did
// would show as U+FFFD rather than fail the sample.
func (j *Job) decodeTokens(t []int32) []byte {
	if j.tok != nil {
		b, err := j.tok.Decode(t)
		if err != nil {
			return []byte("\uFFFD")
		}
		return b
	}
	b := make([]byte, len(t))
	for i, c := range t {
		b[i] = byte(c)
	}
	return b
}

// evalSample generates the sample an evaluation of a text job shows:
// evalSampleTokens from the start of the first test example, seeded by the
// version. It waits for another sample of the job to finish.
func (j *Job) evalSample(params []float32, version int64) string {
	if j.test == nil || j.test.N == 0 {
		return ""
	}
	x := make([]float32, j.test.ExampleSize())
	j.test.FillExample(x, make([]int32, j.test.LabelsPerExample()), 0)
	prompt := make([]int32, min(16, len(x)))
	for i := range prompt {
		prompt[i] = int32(x[i])
	}
	j.sampling.Lock()
	defer j.sampling.Unlock()
	rng := rand.New(rand.NewPCG(uint64(version), 0x73616d706c65))
	out, _, err := generate(j.model, params, prompt, evalSampleTokens, DefaultTemperature, rng, time.Now().Add(sampleTime))
	if err != nil {
		j.logf("job %s: sample at version %d: %v", j.ID, version, err)
		return ""
	}
	return string(j.decodeTokens(prompt)) + string(j.decodeTokens(out))
}

func (s *Server) handleSample(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	j := s.job(id)
	if j == nil {
		writeError(w, http.StatusNotFound, "no job %q", id)
		return
	}
	var req SampleRequest
	// The limit leaves room for a prompt of maxPromptBytes escaped in JSON.
	if !readJSONBody(w, r, &req, maxPromptBytes*8+1024, "a sample request", `{"prompt": "...", "tokens": N, "temperature": T, "seed": S}`) {
		return
	}
	temp := DefaultTemperature
	if req.Temperature != nil {
		temp = *req.Temperature
	}
	if req.Tokens == 0 {
		req.Tokens = DefaultSampleTokens
	}
	switch {
	case !isTextModel(j.model):
		writeError(w, http.StatusBadRequest, "job %s trains a model of input %v, not a text model: only a text job generates text", id, j.model.Spec.Input)
		return
	case req.Prompt == "":
		writeError(w, http.StatusBadRequest, "prompt: give at least one character to continue")
		return
	case len(req.Prompt) > maxPromptBytes:
		writeError(w, http.StatusBadRequest, "prompt: at most %d bytes, got %d (only the last %d are read)", maxPromptBytes, len(req.Prompt), j.model.InputSize)
		return
	case req.Tokens < 0 || req.Tokens > MaxSampleTokens:
		writeError(w, http.StatusBadRequest, "tokens: must be in 1..%d, got %d", MaxSampleTokens, req.Tokens)
		return
	case !(temp >= 0 && temp <= maxTemperature):
		writeError(w, http.StatusBadRequest, "temperature: must be in 0..%d (0 takes the most likely token), got %v", maxTemperature, temp)
		return
	}
	prompt := j.encodeText([]byte(req.Prompt))
	for i, t := range prompt {
		if int(t) >= j.model.NumClasses {
			writeError(w, http.StatusBadRequest, "prompt: token %d is %d, outside the model's vocabulary of %d", i, t, j.model.NumClasses)
			return
		}
	}
	if !lockWithin(r.Context(), &j.sampling, sampleWait) {
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusTooManyRequests, "job %s is generating another sample; try again when it is done (one at a time per job)", id)
		return
	}
	defer j.sampling.Unlock()
	params, version, err := j.currentParams(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "job %s: %v", id, err)
		return
	}
	if req.Seed == 0 {
		req.Seed = rand.Uint64() | 1
	}
	start := time.Now()
	rng := rand.New(rand.NewPCG(req.Seed, 0x73616d706c65))
	out, short, err := generate(j.model, params, prompt, req.Tokens, temp, rng, start.Add(sampleTime))
	if err != nil {
		writeError(w, http.StatusInternalServerError, "generate: %v", err)
		return
	}
	writeJSON(w, Sample{
		JobID: id, Version: version, Prompt: req.Prompt, Text: string(j.decodeTokens(out)),
		Tokens: len(out), Temperature: temp, Seed: req.Seed, Truncated: short,
		Millis: float64(time.Since(start).Microseconds()) / 1000,
	})
}
