package jobspec

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// Init is the `init` key: the parameters a job's version 0 is, instead of
// a random initialization from its seed. It names a safetensors file (as
// `crowdtrain export` writes it: one F32 tensor per entry of the model's
// layout, by name and shape), as a path or as {file: F, sha256: H} (the
// file must then have that SHA-256), or, as {job: ID}, the current model
// of another job on the same coordinator, finished or running. The
// coordinator reads the parameters once, when it creates the job, and
// records where they came from (SHA256 of the file, or the Version of the
// job's model it took), so the stored spec says what the job started
// from. Only the parameters carry over: the optimizer's state starts
// fresh.
type Init struct {
	File string `json:"file,omitempty"`
	Job  string `json:"job,omitempty"`
	// Version is the version of Job's model that was taken; recorded
	// when the job is created (0 until then, and for a file).
	Version int64 `json:"version,omitempty"`
	// SHA256 is the hex SHA-256 of the file's bytes: recorded when the
	// job is created, or given to pin the file's contents.
	SHA256 string `json:"sha256,omitempty"`
}

// initKeys are the keys of the mapping form: {job: ID}, or {file: F}
// with the SHA-256 the file must have (as the stored spec records it).
var initKeys = []string{"file", "sha256", "job", "version"}

const initWant = "want the path of a safetensors file (as crowdtrain export writes it) or {job: ID}, another job on this coordinator"

func decodeInit(val *yaml.Node, s *Spec, _ given) error {
	switch val.Kind {
	case yaml.ScalarNode:
		if strings.TrimSpace(val.Value) == "" || val.Tag == "!!null" {
			return Errorf("init", initWant)
		}
		if val.Tag != "!!str" {
			return Errorf("init", "%s (got %s: quote a file name YAML reads as a number or a boolean)", initWant, val.Value)
		}
		s.Init = &Init{File: val.Value}
		return nil
	case yaml.MappingNode:
	default:
		return Errorf("init", initWant)
	}
	if err := checkKeys("init.", val, initKeys); err != nil {
		return err
	}
	in := &Init{}
	for i := 0; i < len(val.Content); i += 2 {
		k, v := val.Content[i].Value, val.Content[i+1]
		var dst *string
		switch k {
		case "version":
			return Errorf("init.version", "is recorded by the coordinator, not chosen: {job: ID} takes the job's current model; to start from a kept version, export it (crowdtrain export --version V) and give the file")
		case "job":
			dst = &in.Job
		case "file":
			dst = &in.File
		case "sha256":
			dst = &in.SHA256
		}
		if err := decodeScalar(v, dst); err != nil || strings.TrimSpace(*dst) == "" {
			return Errorf("init."+k, "want %s", initKeyWant[k])
		}
	}
	s.Init = in
	return s.validateInit()
}

var initKeyWant = map[string]string{
	"job":    "a job's id, as GET /api/v1/jobs lists it",
	"file":   "the path of a safetensors file",
	"sha256": "the file's SHA-256 in hex (64 digits)",
}

// validateInit checks that init names exactly one source.
func (s Spec) validateInit() error {
	in := s.Init
	switch {
	case in == nil:
		return nil
	case in.File != "" && in.Job != "":
		return Errorf("init", "give a file or {job: ID}, not both")
	case in.File == "" && in.Job == "":
		return Errorf("init", initWant)
	case in.SHA256 != "" && in.File == "":
		return Errorf("init.sha256", "pins a file's contents: give it with file, not job")
	case in.SHA256 != "" && !isSHA256(in.SHA256):
		return Errorf("init.sha256", "want the file's SHA-256 in hex (64 digits), got %q", in.SHA256)
	}
	return nil
}

func isSHA256(h string) bool {
	if len(h) != 64 {
		return false
	}
	for _, c := range h {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Describe says where the parameters came from, for logs and errors.
func (in *Init) Describe() string {
	switch {
	case in == nil:
		return "random"
	case in.Job != "":
		return fmt.Sprintf("job %s at version %d", in.Job, in.Version)
	case in.SHA256 != "":
		return fmt.Sprintf("file %s (sha256 %s)", in.File, in.SHA256)
	}
	return "file " + in.File
}
