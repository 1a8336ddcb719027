package jobspec

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// Init is the `init` key: the parameters a job's version 0 is, instead of
// a random initialization from its seed. It names a safetensors file (as
// `crowdtrain export` writes it: one F32 tensor per entry of the model's
// layout, by name and shape) or, as {job: ID}, the current model of
// another job on the same coordinator, finished or running. The
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
	// SHA256 is the hex SHA-256 of the file's bytes, recorded when the
	// job is created.
	SHA256 string `json:"sha256,omitempty"`
}

// initKeys are the keys of the mapping form.
var initKeys = []string{"job"}

const initWant = "want the path of a safetensors file (as crowdtrain export writes it) or {job: ID}, another job on this coordinator"

func decodeInit(val *yaml.Node, s *Spec, _ given) error {
	switch val.Kind {
	case yaml.ScalarNode:
		if strings.TrimSpace(val.Value) == "" {
			return Errorf("init", initWant)
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
		if err := decodeScalar(val.Content[i+1], &in.Job); err != nil {
			return Errorf("init.job", "want a job's id, as GET /api/v1/jobs lists it: %v", cleanYAMLError(err))
		}
	}
	if strings.TrimSpace(in.Job) == "" {
		return Errorf("init.job", "want a job's id, as GET /api/v1/jobs lists it")
	}
	s.Init = in
	return nil
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
	}
	return nil
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
