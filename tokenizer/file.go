package tokenizer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// The file format, version 1, is text, one item a line:
//
//	crowdtrain-bpe 1
//	pieces code-v1
//	vocab 4096
//	merges 3840
//	32 116
//	...                      (one "LEFT RIGHT" line per merge, in order)
//	end sha256 HEX
//
// vocab is 256 + merges; merge i (the i-th pair line) makes id 256+i. The
// last line's HEX is the SHA-256 of every byte before it, so a truncated
// or altered file is refused rather than encoding differently.
const (
	fileMagic   = "crowdtrain-bpe"
	fileVersion = 1
	// MaxFileBytes bounds a tokenizer file: MaxVocab merges of two 5-digit
	// ids, and the header.
	MaxFileBytes = 1 << 20
)

// WriteTo writes the tokenizer in the file format.
func (t *Tokenizer) WriteTo(w io.Writer) (int64, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %d\npieces %s\nvocab %d\nmerges %d\n", fileMagic, fileVersion, PiecesName, len(t.tokens), len(t.merges))
	for _, m := range t.merges {
		b.WriteString(strconv.Itoa(int(m.Left)))
		b.WriteByte(' ')
		b.WriteString(strconv.Itoa(int(m.Right)))
		b.WriteByte('\n')
	}
	sum := sha256.Sum256(b.Bytes())
	fmt.Fprintf(&b, "end sha256 %s\n", hex.EncodeToString(sum[:]))
	n, err := w.Write(b.Bytes())
	return int64(n), err
}

// Save writes the tokenizer to path (through a temporary file renamed into
// place, so a reader never sees half a file).
func (t *Tokenizer) Save(path string) error {
	tmp, err := os.CreateTemp(dirOf(path), ".tokenizer-*")
	if err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := t.WriteTo(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("tokenizer: writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("tokenizer: writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	return nil
}

func dirOf(path string) string {
	if i := strings.LastIndexAny(path, `/\`); i >= 0 {
		return path[:i+1]
	}
	return "."
}

// Load reads a tokenizer file (Read).
func Load(path string) (*Tokenizer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	return Read(f, path)
}

// FileError is a tokenizer file that cannot be used: the file's name, the
// line (0: the file as a whole) and what is wrong.
type FileError struct {
	Name    string
	Line    int
	Problem string
}

func (e *FileError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("tokenizer file %s, line %d: %s", e.Name, e.Line, e.Problem)
	}
	return fmt.Sprintf("tokenizer file %s: %s", e.Name, e.Problem)
}

// Read reads a tokenizer in the file format from r; name names the file in
// errors (*FileError). It refuses another format or version, a file cut
// short or with anything after its end line, a checksum that does not
// match, a merge of ids out of range, and a repeated merge.
func Read(r io.Reader, name string) (*Tokenizer, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return nil, &FileError{Name: name, Problem: err.Error()}
	}
	bad := func(line int, format string, args ...any) error {
		return &FileError{Name: name, Line: line, Problem: fmt.Sprintf(format, args...)}
	}
	if len(data) > MaxFileBytes {
		return nil, bad(0, "larger than %d bytes: not a tokenizer file", MaxFileBytes)
	}
	if !bytes.HasPrefix(data, []byte(fileMagic+" ")) {
		return nil, bad(1, "does not start with %q: not a tokenizer file (crowdtrain tokenizer train writes one)", fileMagic)
	}
	if len(data) == 0 || data[len(data)-1] != '\n' {
		return nil, bad(0, "does not end with a newline: cut short (write it again with crowdtrain tokenizer train)")
	}
	lines := strings.Split(string(data[:len(data)-1]), "\n")
	header := func(i int, key string) (string, error) {
		if i >= len(lines) {
			return "", bad(i+1, "missing (the file is cut short): want %q", key+" ...")
		}
		v, ok := strings.CutPrefix(lines[i], key+" ")
		if !ok {
			return "", bad(i+1, "%q: want %q", clip(lines[i]), key+" ...")
		}
		return v, nil
	}
	v, err := header(0, fileMagic)
	if err != nil {
		return nil, err
	}
	if v != strconv.Itoa(fileVersion) {
		return nil, bad(1, "version %q; this build reads version %d", clip(v), fileVersion)
	}
	if v, err = header(1, "pieces"); err != nil {
		return nil, err
	}
	if v != PiecesName {
		return nil, bad(2, "pieces %q; this build cuts text as %q and would encode differently", clip(v), PiecesName)
	}
	num := func(i int, key string, lo, hi int) (int, error) {
		v, err := header(i, key)
		if err != nil {
			return 0, err
		}
		n, err := atoi(v)
		if err != nil || n < lo || n > hi {
			return 0, bad(i+1, "%s %q: want a number in %d..%d", key, clip(v), lo, hi)
		}
		return n, nil
	}
	vocab, err := num(2, "vocab", 256, MaxVocab)
	if err != nil {
		return nil, err
	}
	nMerges, err := num(3, "merges", 0, MaxVocab-256)
	if err != nil {
		return nil, err
	}
	if vocab != 256+nMerges {
		return nil, bad(3, "%d merges with a vocabulary of %d: want vocab = 256 + merges", nMerges, vocab)
	}
	const first = 4 // index of the first merge line
	endAt := -1
	for i := first; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "end sha256 ") {
			endAt = i
			break
		}
	}
	switch {
	case endAt < 0:
		return nil, bad(len(lines), "no end line after %d lines of the %d merges: cut short (write it again with crowdtrain tokenizer train)", len(lines)-first, nMerges)
	case endAt < len(lines)-1:
		return nil, bad(endAt+2, "%q after the end line", clip(lines[endAt+1]))
	case endAt != first+nMerges:
		return nil, bad(endAt+1, "the header says %d merges but %d merge lines come before the end line", nMerges, endAt-first)
	}
	sumHex := strings.TrimPrefix(lines[endAt], "end sha256 ")
	body := data[:len(data)-len(lines[endAt])-1]
	sum := sha256.Sum256(body)
	if sumHex != hex.EncodeToString(sum[:]) {
		return nil, bad(endAt+1, "the checksum does not match the file's contents: it was altered or damaged (write it again with crowdtrain tokenizer train)")
	}
	merges := make([]Pair, nMerges)
	seen := make(map[uint64]int, nMerges)
	for i := range merges {
		ln := first + i
		l, r, ok := strings.Cut(lines[ln], " ")
		a, errA := atoi(l)
		b, errB := atoi(r)
		if !ok || errA != nil || errB != nil {
			return nil, bad(ln+1, "%q: want two token ids, LEFT RIGHT", clip(lines[ln]))
		}
		id := 256 + i
		if a < 0 || a >= id || b < 0 || b >= id {
			return nil, bad(ln+1, "merge %d (id %d) joins %d and %d: ids must be in 0..%d, tokens made before it", i, id, a, b, id-1)
		}
		merges[i] = Pair{int32(a), int32(b)}
		if prev, dup := seen[merges[i].key()]; dup {
			return nil, bad(ln+1, "merge %d repeats the pair %d %d of line %d", i, a, b, prev)
		}
		seen[merges[i].key()] = ln + 1
	}
	t, err := New(merges)
	if err != nil {
		return nil, bad(0, "%v", err)
	}
	return t, nil
}

// atoi reads a number written as strconv.Itoa writes it (no sign, no
// leading zeros), so one tokenizer has exactly one file.
func atoi(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err == nil && strconv.Itoa(n) != s {
		err = fmt.Errorf("%q is not written as %d", s, n)
	}
	return n, err
}

// clip shortens a line quoted in an error.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// Compile-time check that a writer of the file format is an io.WriterTo.
var _ io.WriterTo = (*Tokenizer)(nil)
