package tokenizer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func fileBytes(t testing.TB, tok *Tokenizer) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := tok.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// withSum writes a file of the given body lines with a correct checksum:
// a file damaged on purpose, not by accident.
func withSum(lines ...string) []byte {
	body := strings.Join(lines, "\n") + "\n"
	sum := sha256.Sum256([]byte(body))
	return []byte(body + "end sha256 " + hex.EncodeToString(sum[:]) + "\n")
}

func TestSaveLoad(t *testing.T) {
	tok := mustSourceTokenizer(t)
	path := filepath.Join(t.TempDir(), "go.bpe")
	if err := tok.Save(path); err != nil {
		t.Fatal(err)
	}
	back, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.Merges(), tok.Merges()) || !bytes.Equal(fileBytes(t, back), fileBytes(t, tok)) {
		t.Fatal("a saved tokenizer loads with other merges")
	}
	b, _ := os.ReadFile(path)
	if !bytes.HasPrefix(b, []byte("crowdtrain-bpe 1\npieces code-v1\nvocab 1024\nmerges 768\n")) {
		t.Fatalf("file starts %q", b[:60])
	}
}

// Every way a file can be wrong is refused, naming the file and the line.
func TestReadRefuses(t *testing.T) {
	good := fileBytes(t, mustSourceTokenizer(t))
	// Every cut of the file short is refused.
	for n := 0; n < len(good); n += 1 + n/50 {
		if _, err := Read(bytes.NewReader(good[:n]), "go.bpe"); err == nil {
			t.Fatalf("the first %d of %d bytes load", n, len(good))
		}
	}
	altered := bytes.Replace(good, []byte("\n32 "), []byte("\n33 "), 1)
	for _, c := range []struct {
		name string
		file []byte
		want []string
	}{
		{"cut", good[:bytes.IndexByte(good[len(good)/2:], '\n')+len(good)/2+1], []string{"go.bpe, line", "no end line", "cut short"}},
		{"no newline", good[:len(good)-1], []string{"go.bpe", "cut short"}},
		{"html", []byte("<html>404</html>\n"), []string{"go.bpe, line 1", "not a tokenizer file"}},
		{"altered", altered, []string{"go.bpe, line 773", "checksum does not match"}},
		{"trailing", append(slices.Clone(good), "more\n"...), []string{"line 774", `"more" after the end line`}},
		{"version", withSum("crowdtrain-bpe 2", "pieces code-v1", "vocab 256", "merges 0"), []string{"line 1", `version "2"`}},
		{"pieces", withSum("crowdtrain-bpe 1", "pieces gpt2", "vocab 256", "merges 0"), []string{"line 2", `pieces "gpt2"`}},
		{"vocab", withSum("crowdtrain-bpe 1", "pieces code-v1", "vocab 258", "merges 1", "97 98"), []string{"line 3", "vocab = 256 + merges"}},
		{"big vocab", withSum("crowdtrain-bpe 1", "pieces code-v1", "vocab 70000", "merges 69744"), []string{"line 3", "256..65536"}},
		{"duplicate", withSum("crowdtrain-bpe 1", "pieces code-v1", "vocab 259", "merges 3", "97 98", "256 99", "97 98"), []string{"line 7", "repeats the pair 97 98 of line 5"}},
		{"forward id", withSum("crowdtrain-bpe 1", "pieces code-v1", "vocab 258", "merges 2", "97 98", "257 99"), []string{"line 6", "joins 257 and 99", "0..256"}},
		{"negative id", withSum("crowdtrain-bpe 1", "pieces code-v1", "vocab 257", "merges 1", "-1 98"), []string{"line 5", "0..255"}},
		{"not canonical", withSum("crowdtrain-bpe 1", "pieces code-v1", "vocab 257", "merges 1", "097 98"), []string{"line 5", "two token ids"}},
		{"more merges", withSum("crowdtrain-bpe 1", "pieces code-v1", "vocab 257", "merges 1", "97 98", "99 100"), []string{"line 7", "the header says 1 merges but 2 merge lines"}},
	} {
		_, err := Read(bytes.NewReader(c.file), "go.bpe")
		var fe *FileError
		if !errors.As(err, &fe) || fe.Name != "go.bpe" {
			t.Errorf("%s: %v; want a FileError naming go.bpe", c.name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", c.name, err, w)
			}
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "none.bpe")); err == nil || !strings.Contains(err.Error(), "none.bpe") {
		t.Errorf("a missing file: %v", err)
	}
	if _, err := Read(bytes.NewReader(withSum("crowdtrain-bpe 1", "pieces code-v1", "vocab 256", "merges 0")), "bytes.bpe"); err != nil {
		t.Errorf("a tokenizer of the bytes alone: %v", err)
	}
}
