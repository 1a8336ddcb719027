package tokenizer

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

// Whatever the bytes, Read returns a tokenizer or a *FileError, never
// panics; a file it accepts is exactly what WriteTo writes for the result
// (one tokenizer, one file), and the tokenizer round-trips text. The seeds
// are under testdata/fuzz/FuzzRead and run in plain go test.
func FuzzRead(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := Read(bytes.NewReader(data), "fuzz.bpe")
		if err != nil {
			var fe *FileError
			if !errors.As(err, &fe) || fe.Name != "fuzz.bpe" {
				t.Fatalf("error %v is not a FileError naming the file", err)
			}
			return
		}
		if again := fileBytes(t, tok); !bytes.Equal(again, data) {
			t.Fatalf("accepted %q but writes %q", data, again)
		}
		text := []byte("func main() {\n\tfmt.Println(\"héllo\")\n}\n\xff")
		back, err := tok.Decode(tok.Encode(text))
		if err != nil || !bytes.Equal(back, text) {
			t.Fatalf("round trip: %q, %v", back, err)
		}
	})
}

// Any bytes encode into ids of the vocabulary and decode to themselves,
// with a trained tokenizer and with the bytes alone; the pieces cover
// the text. Seeds: testdata/fuzz/FuzzRoundTrip.
func FuzzRoundTrip(f *testing.F) {
	tok := mustSourceTokenizer(f)
	bytesOnly, err := New(nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		var joined []byte
		for p := range Pieces(text) {
			joined = append(joined, p...)
		}
		if !bytes.Equal(joined, text) {
			t.Fatalf("pieces of %q join to %q", text, joined)
		}
		roundTrip(t, tok, text)
		if ids := roundTrip(t, bytesOnly, text); len(ids) != len(text) {
			t.Fatalf("the bytes alone encode %d bytes in %d ids", len(text), len(ids))
		}
		// Encoding is the same piece by piece (the cache changes nothing).
		fresh, _ := New(tok.Merges())
		if !slices.Equal(fresh.Encode(text), tok.Encode(text)) {
			t.Fatalf("a fresh tokenizer encodes %q otherwise", text)
		}
	})
}
