package main

import "time"

// The coordinator's JSON API as status, sample, submit and the controls
// (jobs, tokens, volunteers) read it: only the
// fields they show. These commands are in the worker build, which has no
// cgo and so no coordinator package (it links SQLite through the store);
// the client keeps its own copies, and TestClientViewsMatchTheAPI holds
// each field to the coordinator's name and type.

// jobView is what the client reads of coordinator.JobView.
type jobView struct {
	ID                string             `json:"id"`
	Name              string             `json:"name"`
	State             string             `json:"state"`
	Mode              string             `json:"mode"`
	LR                float64            `json:"lr"`
	MaxStaleness      int                `json:"max_staleness"`
	Weight            float64            `json:"weight"`
	Priority          int                `json:"priority"`
	Version           int64              `json:"version"`
	Epoch             int                `json:"epoch"`
	ExamplesSeen      int64              `json:"examples_seen"`
	UpdatesApplied    int64              `json:"updates_applied"`
	UpdatesRejected   int64              `json:"updates_rejected"`
	Rejections        map[string]int64   `json:"rejections"`
	Workers           int                `json:"workers"`
	NumParams         int                `json:"num_params"`
	Shards            int                `json:"shards"`
	Eval              *evalView          `json:"eval"`
	LastCheckpoint    *checkpointView    `json:"last_checkpoint"`
	CheckpointFailure *checkpointFailure `json:"checkpoint_failure,omitempty"`
}

// evalView is what the client reads of coordinator.EvalResult.
type evalView struct {
	Accuracy float64 `json:"accuracy"`
	Version  int64   `json:"version"`
}

// checkpointView is what the client reads of coordinator.CheckpointStats.
type checkpointView struct {
	Version int64     `json:"version"`
	At      time.Time `json:"at"`
}

// checkpointFailure is what the client reads of coordinator.CheckpointFailure.
type checkpointFailure struct {
	Version      int64     `json:"version"`
	Failures     int       `json:"failures"`
	PendingSince time.Time `json:"pending_since"`
	LastError    string    `json:"last_error"`
}

// workerView is what the client reads of coordinator.WorkerView.
type workerView struct {
	ID          string    `json:"id"`
	Kind        string    `json:"kind"`
	Backend     string    `json:"backend"`
	Threads     int       `json:"threads"`
	Job         string    `json:"job"`
	Examples    int64     `json:"examples"`
	Accepted    int64     `json:"accepted"`
	Rejected    int64     `json:"rejected"`
	ConnectedAt time.Time `json:"connected_at"`
	LastSeen    time.Time `json:"last_seen"`
}

// volunteerView is what the client reads of coordinator.VolunteerView.
type volunteerView struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	TokenName string    `json:"token_name"`
	Examples  int64     `json:"examples"`
	Strikes   int       `json:"strikes"`
	Banned    bool      `json:"banned"`
	BanReason string    `json:"ban_reason"`
	Connected int       `json:"connected"`
	LastSeen  time.Time `json:"last_seen"`
}

// tokenView is what the client reads of coordinator.TokenView.
type tokenView struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	Revoked   bool      `json:"revoked"`
}

// issuedToken is coordinator.IssuedToken.
type issuedToken struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Token string `json:"token"`
}

// tokenRequest and banRequest are the bodies of POST /api/v1/tokens and
// POST /api/v1/volunteers/{id}/ban (docs/VOLUNTEERS.md).
type tokenRequest struct {
	Name string `json:"name"`
}

type banRequest struct {
	Reason string `json:"reason"`
}

// submitRequest is coordinator.SubmitRequest.
type submitRequest struct {
	Spec   string `json:"spec,omitempty"`
	Preset string `json:"preset,omitempty"`
}

// sampleRequest is coordinator.SampleRequest.
type sampleRequest struct {
	Prompt      string   `json:"prompt"`
	Tokens      int      `json:"tokens,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
	Seed        uint64   `json:"seed,omitempty"`
}

// sampleView is coordinator.Sample.
type sampleView struct {
	JobID       string  `json:"job"`
	Version     int64   `json:"version"`
	Prompt      string  `json:"prompt"`
	Text        string  `json:"text"`
	Tokens      int     `json:"tokens"`
	Temperature float64 `json:"temperature"`
	Seed        uint64  `json:"seed"`
	Truncated   bool    `json:"truncated,omitempty"`
	Millis      float64 `json:"ms"`
}

// The coordinator's bounds on a sample (coordinator.MaxSampleTokens and
// its defaults), checked here to give a usage error before the request.
const (
	maxSampleTokens     = 2048
	defaultSampleTokens = 200
	defaultTemperature  = 0.8
)
