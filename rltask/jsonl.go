package rltask

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// MaxJSONLBytes bounds a jsonl task file, which is read whole.
const MaxJSONLBytes = 256 << 20

// JSONLTask is a task whose problems come from a file: one JSON object
// {"prompt": "...", "answer": "..."} per line.
type JSONLTask struct {
	Problems []Problem
	// SHA256 is the hex SHA-256 of the file's bytes (ReadJSONL; empty
	// from ParseJSONL): what a job pins its task file by.
	SHA256 string
}

func (*JSONLTask) Name() string { return JSONL }

// Problem returns one of the file's problems, drawn for (seed, i) as the
// built-in tasks draw theirs: the same on every machine.
func (t *JSONLTask) Problem(seed uint64, i int) Problem {
	return t.Problems[problemRand(seed, i).IntN(len(t.Problems))]
}

// ReadJSONLFile reads a jsonl task file (ReadJSONL); errors name the file.
func ReadJSONLFile(path string) (*JSONLTask, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &KeyError{Key: "path", Problem: err.Error()}
	}
	defer f.Close()
	return ReadJSONL(f, path)
}

// ReadJSONL reads a jsonl task (ParseJSONL) of at most MaxJSONLBytes from
// r, the file name; errors name it, on the key "path".
func ReadJSONL(r io.Reader, name string) (*JSONLTask, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxJSONLBytes+1))
	if err != nil {
		return nil, &KeyError{Key: "path", Problem: fmt.Sprintf("%s: %v", name, err)}
	}
	if len(b) > MaxJSONLBytes {
		return nil, &KeyError{Key: "path", Problem: fmt.Sprintf("%s is larger than %d bytes; split it", name, MaxJSONLBytes)}
	}
	t, err := ParseJSONL(b)
	if err != nil {
		return nil, &KeyError{Key: "path", Problem: fmt.Sprintf("%s: %v", name, err)}
	}
	sum := sha256.Sum256(b)
	t.SHA256 = hex.EncodeToString(sum[:])
	return t, nil
}

// ParseJSONL reads problems, one JSON object per line with exactly the
// keys "prompt" and "answer", both strings: the prompt not empty, the
// answer not empty and without a newline (a newline ends an answer, see
// Reward). Blank lines are skipped. An error names the line (from 1) and
// what is wrong with it; a file without any problem is an error too.
func ParseJSONL(b []byte) (*JSONLTask, error) {
	t := &JSONLTask{}
	for n, line := range bytes.Split(b, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		p, err := parseJSONLLine(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n+1, err)
		}
		t.Problems = append(t.Problems, p)
	}
	if len(t.Problems) == 0 {
		return nil, errors.New(`no problems: want one {"prompt": "...", "answer": "..."} object per line`)
	}
	return t, nil
}

func parseJSONLLine(line []byte) (Problem, error) {
	var raw struct {
		Prompt *string `json:"prompt"`
		Answer *string `json:"answer"`
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return Problem{}, fmt.Errorf(`want a JSON object {"prompt": "...", "answer": "..."}: %v`, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Problem{}, errors.New("something follows the JSON object: put each problem on a line of its own")
	}
	switch {
	case raw.Prompt == nil:
		return Problem{}, errors.New(`no "prompt"`)
	case raw.Answer == nil:
		return Problem{}, errors.New(`no "answer"`)
	case *raw.Prompt == "":
		return Problem{}, errors.New(`"prompt" is empty`)
	case *raw.Answer == "":
		return Problem{}, errors.New(`"answer" is empty: a completion could never be checked against it`)
	case strings.Contains(*raw.Answer, "\n"):
		return Problem{}, errors.New(`"answer" holds a newline, which ends a completion's answer: it could never be matched`)
	}
	return Problem{Prompt: *raw.Prompt, Answer: *raw.Answer}, nil
}
