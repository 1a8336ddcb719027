package relay

import (
	"bytes"
	"math"
	"reflect"
	"strings"
	"testing"
)

func sample() *Aggregate {
	return &Aggregate{ID: "r-1-7", Relay: "r", Job: "j", Run: 2, Base: 41, Round: 9,
		Leases: []uint64{3, 4}, Tasks: []Task{{1, 0, 64}, {1, 64, 64}}, Volunteers: []string{"v", "v"}, Released: []uint64{5},
		Results: 2, Examples: 128, Correct: 100, Credits: []Credit{{Volunteer: "v", Examples: 128, Strikes: 1, Evidence: []uint64{3}}},
		Sum: []float32{1, -2.5, float32(math.Inf(1)), 0}}
}

// An aggregate survives encoding, splitting into parts and joining.
func TestAggregateRoundTripInParts(t *testing.T) {
	a := sample()
	b, err := Encode(a)
	if err != nil {
		t.Fatal(err)
	}
	parts := Split(b, 7)
	if len(parts) != (len(b)+6)/7 {
		t.Fatalf("%d parts of a %d-byte aggregate at 7 bytes each", len(parts), len(b))
	}
	got, err := Decode(bytes.Join(parts, nil))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, a) {
		t.Fatalf("round trip: got %+v, want %+v", got, a)
	}
	for i, n := range []int{1, 3, MaxParts} {
		h := PartHeader(i%n, n)
		if pi, pn, err := ParsePart(h); err != nil || pi != i%n || pn != n {
			t.Errorf("ParsePart(%q) = %d, %d, %v", h, pi, pn, err)
		}
	}
	for _, bad := range []string{"", "1", "2/2", "-1/3", "0/0", "a/b", "0/4097"} {
		if _, _, err := ParsePart(bad); err == nil {
			t.Errorf("ParsePart accepted %q", bad)
		}
	}
}

// Decode refuses what Encode would not write, saying what is wrong.
func TestDecodeRefusesMalformed(t *testing.T) {
	good, _ := Encode(sample())
	for what, b := range map[string][]byte{
		"empty":            nil,
		"header past end":  {0xff, 0xff, 0, 0, '{'},
		"not json":         append([]byte{3, 0, 0, 0}, "abc"...),
		"odd float bytes":  append(bytes.Clone(good), 1),
		"tasks and leases": mustEncode(t, func(a *Aggregate) { a.Tasks = a.Tasks[:1] }),
		"volunteers":       mustEncode(t, func(a *Aggregate) { a.Volunteers = a.Volunteers[:1] }),
	} {
		if _, err := Decode(b); err == nil {
			t.Errorf("%s: decoded", what)
		} else if !strings.Contains(err.Error(), "aggregate") {
			t.Errorf("%s: error %q does not say what it read", what, err)
		}
	}
}

func mustEncode(t *testing.T, edit func(*Aggregate)) []byte {
	a := sample()
	edit(a)
	b, err := Encode(a)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func FuzzDecode(f *testing.F) {
	good, _ := Encode(sample())
	f.Add(good)
	f.Add([]byte{2, 0, 0, 0, '{', '}'})
	f.Add([]byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := Decode(b)
		if err != nil {
			return
		}
		if len(a.Leases) != len(a.Tasks) {
			t.Fatalf("decoded %d leases and %d tasks", len(a.Leases), len(a.Tasks))
		}
		if _, err := Encode(a); err != nil {
			t.Fatalf("a decoded aggregate does not encode: %v", err)
		}
	})
}

// A credit list is believed only as far as the aggregate's own leases
// carry it: each forgery is refused with what was wrong.
func TestCheckCreditsRefusesForgedClaims(t *testing.T) {
	split := func(a *Aggregate) {
		a.Volunteers = []string{"v", "w"}
		a.Credits = []Credit{{Volunteer: "v", Examples: 64}, {Volunteer: "w", Examples: 64}}
	}
	for what, edit := range map[string]func(*Aggregate){
		"as sent":        func(*Aggregate) {},
		"two volunteers": split,
		"strike of another": func(a *Aggregate) {
			a.Credits = append(a.Credits, Credit{Volunteer: "x", Strikes: 1, Evidence: []uint64{9}})
		},
		"a lease of nobody known": func(a *Aggregate) { a.Volunteers[1], a.Credits[0].Examples = "", 64 },
	} {
		a := sample()
		edit(a)
		if err := a.CheckCredits(); err != nil {
			t.Errorf("%s: refused: %v", what, err)
		}
	}
	for what, c := range map[string]struct {
		edit func(*Aggregate)
		says string
	}{
		"foreign volunteer": {func(a *Aggregate) {
			a.Credits = append(a.Credits, Credit{Volunteer: "a-0123456789abcdef", Examples: 1})
		}, "names for none"},
		"negative":                {func(a *Aggregate) { split(a); a.Credits[0].Examples, a.Credits[1].Examples = -64, 192 }, "never negative"},
		"more than its tasks":     {func(a *Aggregate) { a.Credits[0].Examples = 3e15 }, "hold 128"},
		"sum short":               {func(a *Aggregate) { split(a); a.Credits = a.Credits[:1] }, "add up to 64"},
		"twice":                   {func(a *Aggregate) { a.Credits = append(a.Credits, a.Credits[0]) }, "twice"},
		"strike without evidence": {func(a *Aggregate) { a.Credits[0].Strikes = 100 }, "evidence"},
		"too many strikes": {func(a *Aggregate) {
			a.Credits[0].Strikes, a.Credits[0].Evidence = MaxStrikes+1, make([]uint64, MaxStrikes+1)
		}, "at most"},
		"negative strikes": {func(a *Aggregate) { a.Credits[0].Strikes = -1 }, "strikes"},
	} {
		a := sample()
		c.edit(a)
		err := a.CheckCredits()
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: got %v, want an error saying %q", what, err, c.says)
		}
	}
}

func TestValidName(t *testing.T) {
	for _, ok := range []string{"relay-1", "a_b", "Z9"} {
		if !ValidName(ok) {
			t.Errorf("%q refused", ok)
		}
	}
	for _, bad := range []string{"", "a.b", "a b", "*", ">", strings.Repeat("a", 65)} {
		if ValidName(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
}
