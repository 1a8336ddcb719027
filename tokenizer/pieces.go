package tokenizer

import (
	"iter"
	"unicode"
	"unicode/utf8"
)

// PiecesName names the cut Pieces makes; a tokenizer file records it, so a
// file trained with another cut is refused rather than encoding wrongly.
const PiecesName = "code-v1"

// MaxPiece is the longest piece in bytes: a longer one (a run of 5,000
// spaces, a base64 blob) is cut into pieces of at most MaxPiece bytes at
// character boundaries, which bounds a token's length and the work of
// encoding one piece.
const MaxPiece = 64

// Pieces cuts text into the pieces BPE merges within. It follows the
// pattern of OpenAI's cl100k tokenizer, without its contractions, read left
// to right with the first alternative that matches winning:
//
//  1. letters, after at most one character that is not a newline, letter
//     or digit: "foo", " foo", ".Println", "_bar", "\tif", "'s";
//  2. one to three digits: "202", "6";
//  3. punctuation (neither space, letter nor digit) after at most one
//     space, with the newlines right after it: " :=", "{\n", ")\n\n";
//  4. whitespace up to and including its last newline: "\n", "  \n\n";
//  5. whitespace but its last character, when a non-space follows, so the
//     last one joins the next piece: "\t\t" of "\t\t\tx" (the third tab
//     goes with x);
//  6. any other whitespace: " " before a digit, trailing spaces at the end.
//
// Bytes that are not UTF-8 count as punctuation, one byte each. The pieces
// cover text exactly: concatenated they are text.
func Pieces(text []byte) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for i := 0; i < len(text); {
			j := pieceEnd(text, i)
			for i < j {
				k := j
				if k-i > MaxPiece {
					k = i + MaxPiece
					for k > i+1 && !utf8.RuneStart(text[k]) {
						k--
					}
				}
				if !yield(text[i:k]) {
					return
				}
				i = k
			}
		}
	}
}

// Character classes of the cut.
const (
	classLetter = iota
	classDigit
	classSpace
	classOther // punctuation, symbols, bytes that are not UTF-8
)

func classOf(r rune) int {
	if r < utf8.RuneSelf {
		switch c := byte(r); {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
			return classLetter
		case '0' <= c && c <= '9':
			return classDigit
		case c == ' ', '\t' <= c && c <= '\r':
			return classSpace
		case c == 0x85, c == 0xA0:
			return classSpace
		}
		return classOther
	}
	switch {
	case r == utf8.RuneError:
		return classOther
	case unicode.IsLetter(r):
		return classLetter
	case unicode.IsNumber(r):
		return classDigit
	case unicode.IsSpace(r):
		return classSpace
	}
	return classOther
}

// at decodes the character at i: its class, rune and size (0 at the end).
func at(text []byte, i int) (class int, r rune, size int) {
	if i >= len(text) {
		return -1, 0, 0
	}
	if c := text[i]; c < utf8.RuneSelf {
		return classOf(rune(c)), rune(c), 1
	}
	r, size = utf8.DecodeRune(text[i:])
	return classOf(r), r, size
}

// run returns the end of the run of class c starting at i.
func run(text []byte, i, c int) int {
	for {
		cl, _, n := at(text, i)
		if n == 0 || cl != c {
			return i
		}
		i += n
	}
}

func isNewline(r rune) bool { return r == '\n' || r == '\r' }

// pieceEnd returns the end of the piece starting at i < len(text).
func pieceEnd(text []byte, i int) int {
	c, r, n := at(text, i)
	next, _, _ := at(text, i+n)
	// 1. Letters, perhaps after one character that is not a newline or digit.
	if c == classLetter {
		return run(text, i, classLetter)
	}
	if next == classLetter && c != classDigit && !isNewline(r) {
		return run(text, i+n, classLetter)
	}
	// 2. One to three digits.
	if c == classDigit {
		j := i + n
		for k := 1; k < 3; k++ {
			cl, _, m := at(text, j)
			if cl != classDigit {
				break
			}
			j += m
		}
		return j
	}
	// 3. Punctuation after at most one space, and the newlines after it.
	p := i
	if r == ' ' && next == classOther {
		p = i + n
	}
	if pc, _, _ := at(text, p); pc == classOther {
		j := run(text, p, classOther)
		for j < len(text) && (text[j] == '\n' || text[j] == '\r') {
			j++
		}
		return j
	}
	// c is classSpace from here on.
	end := run(text, i, classSpace)
	// 4. Whitespace through its last newline.
	for j := end - 1; j >= i; j-- {
		if text[j] == '\n' || text[j] == '\r' {
			return j + 1
		}
	}
	// 5. All but the last whitespace character when a non-space follows.
	if end < len(text) {
		last := end - 1
		for last > i && !utf8.RuneStart(text[last]) {
			last--
		}
		if last > i {
			return last
		}
	}
	// 6. The rest.
	return end
}
