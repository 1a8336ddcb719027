package rltask

import (
	"fmt"
	"slices"
	"strings"
)

// Task names.
const (
	Add     = "add"
	Reverse = "reverse"
	Sort    = "sort"
	JSONL   = "jsonl"
)

// Names lists the tasks in documentation order.
var Names = []string{Add, Reverse, Sort, JSONL}

// Limits on the generated tasks' sizes: an add operand fits an int64 with
// room for the sum, and a string stays a short prompt.
const (
	MaxDigits = 18
	MaxLength = 256
)

// Problem is one prompt and the answer a completion must give.
type Problem struct {
	Prompt string `json:"prompt"`
	Answer string `json:"answer"`
}

// Text is the problem as supervised training text: the prompt, the answer
// and the newline that ends it.
func (p Problem) Text() string { return p.Prompt + p.Answer + "\n" }

// Task hands out the problems of one task.
type Task interface {
	// Name is the task's name (Add, Reverse, Sort or JSONL).
	Name() string
	// Problem returns problem i (i >= 0) of the stream seed: the same on
	// every machine for the same seed and index.
	Problem(seed uint64, i int) Problem
}

// Spec selects a task and its size: Digits for add, Length for reverse
// and sort, Path (a jsonl file) for jsonl, with SHA256 (hex) pinning the
// file's contents where set.
type Spec struct {
	Name   string
	Digits int
	Length int
	Path   string
	SHA256 string `json:",omitempty"`
}

// Validate checks that the spec's name is known and that it sets exactly
// the size its task reads. Errors name the key: "name", "digits",
// "length" or "path".
func (s Spec) Validate() error {
	if !slices.Contains(Names, s.Name) {
		return &KeyError{Key: "name", Problem: fmt.Sprintf("%q is not a task (want %s)", s.Name, strings.Join(Names, ", "))}
	}
	uses := map[string]bool{"digits": s.Name == Add, "length": s.Name == Reverse || s.Name == Sort, "path": s.Name == JSONL, "sha256": s.Name == JSONL}
	set := map[string]bool{"digits": s.Digits != 0, "length": s.Length != 0, "path": s.Path != "", "sha256": s.SHA256 != ""}
	for _, k := range []string{"digits", "length", "path", "sha256"} {
		if set[k] && !uses[k] {
			return &KeyError{Key: k, Problem: fmt.Sprintf("is not a key of task %s (remove it)", s.Name)}
		}
	}
	switch s.Name {
	case Add:
		if s.Digits < 1 || s.Digits > MaxDigits {
			return &KeyError{Key: "digits", Problem: fmt.Sprintf("task add needs digits in 1..%d (the size of each operand), got %d", MaxDigits, s.Digits)}
		}
	case Reverse, Sort:
		if s.Length < 1 || s.Length > MaxLength {
			return &KeyError{Key: "length", Problem: fmt.Sprintf("task %s needs length in 1..%d (the characters of the string), got %d", s.Name, MaxLength, s.Length)}
		}
	case JSONL:
		if s.Path == "" {
			return &KeyError{Key: "path", Problem: "task jsonl needs path: a file of {\"prompt\": ..., \"answer\": ...} lines"}
		}
		if s.SHA256 != "" && !isSHA256(s.SHA256) {
			return &KeyError{Key: "sha256", Problem: fmt.Sprintf("want the file's SHA-256 in lower-case hex (64 digits), got %q", s.SHA256)}
		}
	}
	return nil
}

// New returns the task the spec selects. A jsonl task reads its file now.
func New(s Spec) (Task, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	switch s.Name {
	case Add:
		return addTask{digits: s.Digits}, nil
	case Reverse:
		return reverseTask{length: s.Length}, nil
	case Sort:
		return sortTask{length: s.Length}, nil
	}
	return ReadJSONLFile(s.Path)
}

// KeyError is a problem with one key of a task spec.
type KeyError struct {
	Key     string
	Problem string
}

func (e *KeyError) Error() string { return e.Key + ": " + e.Problem }

// isSHA256 reports whether h is a SHA-256 in lower-case hex.
func isSHA256(h string) bool {
	if len(h) != 64 {
		return false
	}
	for _, c := range h {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
