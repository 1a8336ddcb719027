package tokenizer

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func pieces(s string) []string {
	var out []string
	for p := range Pieces([]byte(s)) {
		out = append(out, string(p))
	}
	return out
}

func TestPieces(t *testing.T) {
	for _, c := range []struct {
		text string
		want []string
	}{
		{"package main\n\nimport \"fmt\"\n", []string{"package", " main", "\n\n", "import", ` "`, "fmt", "\"\n"}},
		{"\t\tx := 42\n", []string{"\t", "\tx", " :=", " ", "42", "\n"}},
		{"fmt.Println(x)", []string{"fmt", ".Println", "(x", ")"}},
		{"}\n\nfunc f() {\n\treturn\n}\n", []string{"}\n\n", "func", " f", "()", " {\n", "\treturn", "\n", "}\n"}},
		{"12345", []string{"123", "45"}},
		{"a\xffb", []string{"a", "\xffb"}},
		{"x   ", []string{"x", "   "}},
		{"héllo wörld", []string{"héllo", " wörld"}},
		{"a \r\n b", []string{"a", " \r\n", " b"}},
		{"it's // ok", []string{"it", "'s", " //", " ok"}},
		{"", nil},
	} {
		if got := pieces(c.text); !slices.Equal(got, c.want) {
			t.Errorf("Pieces(%q) = %q, want %q", c.text, got, c.want)
		}
	}
	// Long runs are cut at MaxPiece bytes, at character boundaries.
	got := pieces(strings.Repeat(" ", 200) + "x")
	if want := []string{strings.Repeat(" ", 64), strings.Repeat(" ", 64), strings.Repeat(" ", 64), strings.Repeat(" ", 7), " x"}; !slices.Equal(got, want) {
		t.Errorf("200 spaces and x: %q", got)
	}
	got = pieces(strings.Repeat("€", 50))
	if want := []string{strings.Repeat("€", 21), strings.Repeat("€", 21), strings.Repeat("€", 8)}; !slices.Equal(got, want) {
		t.Errorf("50 euro signs: %q", got)
	}
}

// Pieces cover any bytes exactly, none empty or over MaxPiece.
func TestPiecesCoverText(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "Z", "é", "ж", "語", "7", "٣", " ", "\t", "\n", "\r", "\u00a0", "\u2003", ".", "(", "'", "\"", "\xff", "\x00", "€"}
	for range 2000 {
		var b strings.Builder
		for range rng.IntN(200) {
			if rng.IntN(4) == 0 {
				b.WriteByte(byte(rng.IntN(256)))
			} else {
				b.WriteString(alphabet[rng.IntN(len(alphabet))])
			}
		}
		text := []byte(b.String())
		var joined []byte
		for p := range Pieces(text) {
			if len(p) == 0 || len(p) > MaxPiece {
				t.Fatalf("Pieces(%q) yields a piece of %d bytes", text, len(p))
			}
			joined = append(joined, p...)
		}
		if !bytes.Equal(joined, text) {
			t.Fatalf("Pieces(%q) joined is %q", text, joined)
		}
	}
}
