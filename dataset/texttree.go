package dataset

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// TextFile is one file of a text tree: its path relative to the tree's
// root, with "/" between directories, and its bytes.
type TextFile struct {
	Rel  string
	Data []byte
}

// TextTree is a tree of text files read by a glob and split by file into
// training and held-out (validation) files, each list in path order.
type TextTree struct {
	Train, Val []TextFile
	// Duplicates counts the files left out as exact copies (same bytes)
	// of a file earlier in path order.
	Duplicates int
}

// Text concatenates files' bytes in their order.
func Text(files []TextFile) []byte {
	n := 0
	for _, f := range files {
		n += len(f.Data)
	}
	out := make([]byte, 0, n)
	for _, f := range files {
		out = append(out, f.Data...)
	}
	return out
}

// valHash places a relative path in [0, 1): the file is held out when it is
// below the validation fraction. It depends on the path alone, so adding or
// removing other files never moves a file between the splits, and a window
// never straddles them.
func valHash(rel string) float64 {
	h := sha256.Sum256([]byte("crowdtrain/val\x00" + rel))
	return float64(binary.BigEndian.Uint64(h[:8])>>11) / (1 << 53)
}

const textTreeFix = "name a directory of UTF-8 text files and a glob that selects them (e.g. **/*.go)"

// ReadTextTree reads the files under dir whose relative path matches glob
// (CheckGlob), leaving out hidden files and directories (a name starting
// with "."), and splits them by file: a file is held out when the hash of
// its relative path (valHash) falls below valFraction, and at least one
// file lands on each side. Exact duplicates are read once, the first in
// path order kept. A file holding a NUL byte or invalid UTF-8 is an error
// naming it; so are a symlink that leads out of the tree and a FIFO, device
// or socket that matches the glob. Symlinked directories are not followed.
// Errors are *KeyError for dataset.path (or dataset.glob).
func ReadTextTree(dir, glob string, valFraction float64) (*TextTree, error) {
	if err := CheckGlob(glob); err != nil {
		return nil, &KeyError{Key: "dataset.glob", Problem: err.Error()}
	}
	if !(valFraction > 0 && valFraction <= 0.5) {
		return nil, &KeyError{Key: "dataset.val_fraction", Problem: fmt.Sprintf("must be in (0, 0.5], got %v", valFraction)}
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fileError("path", dir, err, textTreeFix)
	}
	if !fi.IsDir() {
		return nil, fileError("path", dir, errors.New("is not a directory: a glob selects files of a directory tree"), "name a directory, or leave out glob to read the file itself")
	}
	realRoot, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fileError("path", dir, err, textTreeFix)
	}
	if realRoot, err = filepath.Abs(realRoot); err != nil {
		return nil, fileError("path", dir, err, textTreeFix)
	}
	var files []TextFile
	err = filepath.WalkDir(realRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fileError("path", p, err, "")
		}
		if p == realRoot {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(realRoot, p)
		if err != nil {
			return fileError("path", p, err, "")
		}
		rel = filepath.ToSlash(rel)
		if !matchGlob(glob, rel) {
			return nil
		}
		shown := filepath.Join(dir, filepath.FromSlash(rel))
		if d.Type()&fs.ModeSymlink != 0 {
			real, err := filepath.EvalSymlinks(p)
			if err != nil {
				return fileError("path", shown, err, "remove the broken symlink or leave it out of the glob")
			}
			if !within(realRoot, real) {
				return &KeyError{Key: "dataset.path", Problem: fmt.Sprintf("%s leads (through a symlink) to %s, outside the tree %s: copy the file in, or leave it out of the glob", shown, real, dir)}
			}
			if st, err := os.Stat(real); err == nil && st.IsDir() {
				return nil // a symlinked directory: not followed
			}
		}
		b, err := readRegular(p)
		if err != nil {
			return fileError("path", shown, err, "leave it out of the glob")
		}
		if i := bytes.IndexByte(b, 0); i >= 0 {
			return fileError("path", shown, fmt.Errorf("a binary file (a NUL byte at offset %d), not text", i), "leave it out of the glob (a narrower pattern, such as **/*.go)")
		}
		if err := checkUTF8(b); err != nil {
			return fileError("path", shown, fmt.Errorf("a binary file? %w", err), "convert it to UTF-8 or leave it out of the glob")
		}
		files = append(files, TextFile{Rel: rel, Data: b})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, &KeyError{Key: "dataset.glob", Problem: fmt.Sprintf("%q matches no file under %s (hidden files and directories are left out). Fix: "+textTreeFix, glob, dir)}
	}
	slices.SortFunc(files, func(a, b TextFile) int { return strings.Compare(a.Rel, b.Rel) })
	t := &TextTree{}
	seen := make(map[[32]byte]bool, len(files))
	kept := files[:0]
	for _, f := range files {
		h := sha256.Sum256(f.Data)
		if seen[h] {
			t.Duplicates++
			continue
		}
		seen[h] = true
		kept = append(kept, f)
	}
	if len(kept) < 2 {
		return nil, &KeyError{Key: "dataset.glob", Problem: fmt.Sprintf("%q matches %d distinct file under %s; a tree is split by file and needs at least 2 (or name the file itself to split its bytes)", glob, len(kept), dir)}
	}
	// Every file's place in [0, 1); the lowest is held out and the highest
	// trained on even when the fraction would take none or all.
	lo, hi := 0, 0
	hash := make([]float64, len(kept))
	for i, f := range kept {
		hash[i] = valHash(f.Rel)
		if hash[i] < hash[lo] {
			lo = i
		}
		if hash[i] > hash[hi] {
			hi = i
		}
	}
	for i, f := range kept {
		if i == lo || (hash[i] < valFraction && i != hi) {
			t.Val = append(t.Val, f)
		} else {
			t.Train = append(t.Train, f)
		}
	}
	return t, nil
}
