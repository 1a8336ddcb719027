package protocol

import (
	"errors"
	"strings"
	"testing"
)

func TestAssignAndRevokeRoundTrip(t *testing.T) {
	for _, m := range []Message{
		&Assign{Job: JobInfo{ID: "j2", Name: "second", NumParams: 10, UpdateCodec: CodecI8},
			Limits: Limits{MaxMessageBytes: 1 << 20, LeaseTimeoutMs: 60000, MaxLeases: 2}},
		&Revoke{JobID: "j1", Reason: "job j1 is done"},
		&Hello{Protocol: Version, Kind: KindBrowser, Backend: "wasm-go", Threads: 1, Job: "sweep-1",
			Caps: &Caps{MemoryMB: 2048, Layers: []string{"dense", "relu"}, Data: []string{"ab12"}}},
		&Start{LeaseID: 3, JobID: "j2"},
		&Release{LeaseIDs: []uint64{3}, Reason: "no", JobID: "j2"},
	} {
		b, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(b, 1<<20)
		if err != nil {
			t.Fatalf("%s: %v", m.MessageType(), err)
		}
		if got.MessageType() != m.MessageType() {
			t.Fatalf("decoded %s as %s", m.MessageType(), got.MessageType())
		}
	}
	h, _ := Decode(mustEncode(t, &Hello{Protocol: Version, Kind: KindNative, Backend: "b", Threads: 1, Caps: &Caps{MemoryMB: 512}}), 1<<20)
	if c := h.(*Hello).Caps; c == nil || c.MemoryMB != 512 {
		t.Fatalf("caps %+v", c)
	}
}

func mustEncode(t *testing.T, m Message) []byte {
	t.Helper()
	b, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestJobMessagesRefuseBadFields(t *testing.T) {
	hello := func(c *Caps) *Hello {
		return &Hello{Protocol: Version, Kind: KindNative, Backend: "b", Threads: 1, Caps: c}
	}
	for _, c := range []struct {
		m     Message
		field string
	}{
		{&Assign{Job: JobInfo{NumParams: 3}, Limits: Limits{1, 1, 1}}, "job.id"},
		{&Assign{Job: JobInfo{ID: "j", NumParams: 0}, Limits: Limits{1, 1, 1}}, "job.num_params"},
		{&Assign{Job: JobInfo{ID: "j", NumParams: 3}}, "limits"},
		{&Revoke{}, "job_id"},
		{hello(&Caps{MemoryMB: -1}), "caps.memory_mb"},
		{hello(&Caps{MaxParams: -1}), "caps.max_params"},
		{hello(&Caps{Layers: make([]string, 65)}), "caps.layers"},
		{hello(&Caps{Layers: []string{""}}), "caps.layers[0]"},
		{hello(&Caps{Data: []string{strings.Repeat("k", 200)}}), "caps.data[0]"},
		{&Hello{Protocol: Version, Kind: KindNative, Backend: "b", Threads: 1, Job: strings.Repeat("j", 200)}, "job"},
		{&Start{LeaseID: 1, JobID: strings.Repeat("j", 200)}, "job_id"},
	} {
		err := c.m.Validate()
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Field != c.field {
			t.Errorf("%T %+v: %v, want an error naming %s", c.m, c.m, err, c.field)
		}
	}
	// A welcome without a job is valid: no job fits the worker yet.
	if err := (&Welcome{WorkerID: "w1"}).Validate(); err != nil {
		t.Errorf("a welcome naming no job: %v", err)
	}
}
