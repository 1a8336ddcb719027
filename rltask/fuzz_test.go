package rltask

import (
	"strings"
	"testing"
)

// ParseJSONL never panics, and what it accepts are problems Reward can
// match: a prompt, and an answer without a newline that its own text
// earns 1 for.
func FuzzParseJSONL(f *testing.F) {
	f.Add([]byte(`{"prompt": "1+1=", "answer": "2"}` + "\n"))
	f.Add([]byte("{\"prompt\": \"a\", \"answer\": \"b\"}\r\n\n{\"prompt\": \"\\u00e9=\", \"answer\": \"\\u00e9\"}"))
	f.Add([]byte(`{"prompt": "a", "answer": "b"}}`))
	f.Add([]byte(`{"prompt": "a", "answer": "b\n"}`))
	f.Add([]byte("\xff\xfe"))
	f.Add([]byte(`[{"prompt": "a", "answer": "b"}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		task, err := ParseJSONL(b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "line ") && !strings.HasPrefix(err.Error(), "no problems") {
				t.Fatalf("error %q names no line", err)
			}
			return
		}
		for _, p := range task.Problems {
			if p.Prompt == "" || p.Answer == "" || strings.Contains(p.Answer, "\n") || Reward(p, p.Answer) != 1 {
				t.Fatalf("accepted an unusable problem %+v", p)
			}
		}
		if p := task.Problem(1, 0); Reward(p, p.Answer+"\n") != 1 {
			t.Fatalf("problem %+v", p)
		}
	})
}
