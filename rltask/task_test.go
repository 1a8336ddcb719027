package rltask

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func mustTask(t *testing.T, s Spec) Task {
	t.Helper()
	task, err := New(s)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// The same seed and index give the same problem, on a fresh task value
// too; other seeds and indices give other problems.
func TestGeneratorsAreDeterministic(t *testing.T) {
	for _, s := range []Spec{{Name: Add, Digits: 3}, {Name: Reverse, Length: 8}, {Name: Sort, Length: 8}} {
		a, b := mustTask(t, s), mustTask(t, s)
		seen := map[string]bool{}
		for i := range 200 {
			p, q := a.Problem(42, i), b.Problem(42, i)
			if p != q {
				t.Fatalf("%s: problem %d of seed 42 is %v once and %v the next time", s.Name, i, p, q)
			}
			seen[p.Prompt] = true
		}
		if len(seen) < 190 {
			t.Errorf("%s: only %d distinct prompts in 200", s.Name, len(seen))
		}
		if a.Problem(42, 0) == a.Problem(43, 0) && a.Problem(42, 1) == a.Problem(43, 1) {
			t.Errorf("%s: seeds 42 and 43 start with the same problems", s.Name)
		}
	}
}

// Fixed problems pin the generators: a change to the PCG use or the prompt
// format would change every job's data, so it must show here.
func TestGeneratorsPinnedProblems(t *testing.T) {
	add := mustTask(t, Spec{Name: Add, Digits: 2}).Problem(1, 0)
	rev := mustTask(t, Spec{Name: Reverse, Length: 5}).Problem(1, 0)
	srt := mustTask(t, Spec{Name: Sort, Length: 5}).Problem(1, 0)
	got := []string{add.Text(), rev.Text(), srt.Text()}
	want := []string{"54+28=82\n", "reverse:mffza=azffm\n", "sort:42290=02249\n"}
	if !slices.Equal(got, want) {
		t.Errorf("problem 0 of seed 1: got %q, want %q", got, want)
	}
}

func TestAddProblems(t *testing.T) {
	for _, digits := range []int{1, 2, 5, MaxDigits} {
		task := mustTask(t, Spec{Name: Add, Digits: digits})
		for i := range 300 {
			p := task.Problem(7, i)
			lhs, ok := strings.CutSuffix(p.Prompt, "=")
			as, bs, ok2 := strings.Cut(lhs, "+")
			if !ok || !ok2 {
				t.Fatalf("digits %d: prompt %q is not A+B=", digits, p.Prompt)
			}
			for _, s := range []string{as, bs} {
				if len(s) != digits || (digits > 1 && s[0] == '0') {
					t.Fatalf("digits %d: operand %q of %q has not %d digits", digits, s, p.Prompt, digits)
				}
			}
			a, _ := strconv.ParseInt(as, 10, 64)
			b, _ := strconv.ParseInt(bs, 10, 64)
			if p.Answer != strconv.FormatInt(a+b, 10) {
				t.Fatalf("%q: answer %q, want %d", p.Prompt, p.Answer, a+b)
			}
		}
	}
}

func TestReverseAndSortProblems(t *testing.T) {
	for _, n := range []int{1, 7, MaxLength} {
		rev := mustTask(t, Spec{Name: Reverse, Length: n})
		srt := mustTask(t, Spec{Name: Sort, Length: n})
		for i := range 100 {
			p := rev.Problem(3, i)
			s, ok := strings.CutPrefix(strings.TrimSuffix(p.Prompt, "="), "reverse:")
			if !ok || len(s) != n || strings.Trim(s, "abcdefghijklmnopqrstuvwxyz") != "" {
				t.Fatalf("reverse prompt %q: want reverse:<%d lowercase letters>=", p.Prompt, n)
			}
			for j := range n {
				if p.Answer[j] != s[n-1-j] {
					t.Fatalf("reverse %q: answer %q", s, p.Answer)
				}
			}
			p = srt.Problem(3, i)
			s, ok = strings.CutPrefix(strings.TrimSuffix(p.Prompt, "="), "sort:")
			if !ok || len(s) != n || strings.Trim(s, "0123456789") != "" {
				t.Fatalf("sort prompt %q: want sort:<%d digits>=", p.Prompt, n)
			}
			if len(p.Answer) != n || !slices.IsSorted([]byte(p.Answer)) {
				t.Fatalf("sort %q: answer %q is not sorted", s, p.Answer)
			}
			for d := byte('0'); d <= '9'; d++ {
				if strings.Count(s, string(d)) != strings.Count(p.Answer, string(d)) {
					t.Fatalf("sort %q: answer %q has other digits", s, p.Answer)
				}
			}
		}
	}
}

func TestReward(t *testing.T) {
	p := Problem{Prompt: "12+34=", Answer: "46"}
	for completion, want := range map[string]float64{
		"46": 1, "46\n": 1, "46\n12+1=13": 1,
		"": 0, "\n46": 0, "4": 0, "466": 0, "046": 0, " 46": 0, "46 \n": 0, "45\n": 0,
	} {
		if got := Reward(p, completion); got != want {
			t.Errorf("Reward(%q, %q) = %v, want %v", p.Answer, completion, got, want)
		}
	}
	// Every generated problem's own answer earns 1, a changed one 0.
	task := mustTask(t, Spec{Name: Add, Digits: 3})
	for i := range 50 {
		p := task.Problem(9, i)
		if Reward(p, p.Answer+"\n") != 1 || Reward(p, p.Answer+"0") != 0 {
			t.Fatalf("%v: the answer is not rewarded exactly", p)
		}
	}
}

func TestSpecErrors(t *testing.T) {
	for _, c := range []struct {
		spec      Spec
		key, text string
	}{
		{Spec{Name: "mul", Digits: 2}, "name", `"mul" is not a task`},
		{Spec{Name: Add}, "digits", "digits in 1..18"},
		{Spec{Name: Add, Digits: 19}, "digits", "got 19"},
		{Spec{Name: Add, Digits: 2, Length: 3}, "length", "not a key of task add"},
		{Spec{Name: Reverse}, "length", "length in 1..256"},
		{Spec{Name: Sort, Length: -1}, "length", "got -1"},
		{Spec{Name: Sort, Length: 4, Digits: 2}, "digits", "not a key of task sort"},
		{Spec{Name: JSONL}, "path", "needs path"},
		{Spec{Name: JSONL, Path: "x", Length: 2}, "length", "not a key of task jsonl"},
	} {
		_, err := New(c.spec)
		var ke *KeyError
		if !errors.As(err, &ke) || ke.Key != c.key || !strings.Contains(ke.Problem, c.text) {
			t.Errorf("%+v: error %v, want key %s saying %q", c.spec, err, c.key, c.text)
		}
	}
}

func TestJSONLTask(t *testing.T) {
	path := filepath.Join(t.TempDir(), "qa.jsonl")
	body := "{\"prompt\": \"capital of France=\", \"answer\": \"Paris\"}\n\n{\"answer\": \"4\", \"prompt\": \"2*2=\"}\n"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	task := mustTask(t, Spec{Name: JSONL, Path: path})
	seen := map[Problem]bool{}
	for i := range 50 {
		p := task.Problem(5, i)
		if p != task.Problem(5, i) {
			t.Fatal("jsonl problems are not deterministic")
		}
		seen[p] = true
	}
	want := map[Problem]bool{{"capital of France=", "Paris"}: true, {"2*2=", "4"}: true}
	if len(seen) != 2 || !seen[Problem{"capital of France=", "Paris"}] || !seen[Problem{"2*2=", "4"}] {
		t.Errorf("problems drawn: %v, want both of %v", seen, want)
	}
	if _, err := New(Spec{Name: JSONL, Path: filepath.Join(t.TempDir(), "none.jsonl")}); err == nil || !strings.Contains(err.Error(), "none.jsonl") {
		t.Errorf("missing file: error %v, want one naming it", err)
	}
}

func TestParseJSONLErrors(t *testing.T) {
	good := `{"prompt": "a=", "answer": "b"}`
	for body, want := range map[string]string{
		"":                                   "no problems",
		"\n  \n":                             "no problems",
		good + "\n{\"prompt\": \"x=\"}":      `line 2: no "answer"`,
		`{"answer": "1"}`:                    `line 1: no "prompt"`,
		good + "\n\nnot json":                "line 3: want a JSON object",
		`{"prompt": "", "answer": "1"}`:      `line 1: "prompt" is empty`,
		`{"prompt": "a=", "answer": ""}`:     `line 1: "answer" is empty`,
		`{"prompt": "a=", "answer": "x\ny"}`: `line 1: "answer" holds a newline`,
		`{"prompt": "a=", "answer": "b", "id": 3}`: `line 1: want a JSON object`,
		`{"prompt": 1, "answer": "b"}`:             `line 1: want a JSON object`,
		good + " " + good:                          "line 1: something follows",
		good + "}":                                 "line 1: something follows",
		`null`:                                     `line 1: no "prompt"`,
	} {
		_, err := ParseJSONL([]byte(body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", body, err, want)
		}
	}
}
