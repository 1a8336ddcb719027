package rljob

import (
	"bytes"

	"github.com/crowdtrain/crowdtrain/rltask"
	"github.com/crowdtrain/crowdtrain/tokenizer"
)

// Codec is how a policy's tokens stand for text: bytes, for a byte-level
// model (charlm), or the ids of its BPE tokenizer (gpt-mini). A prompt is
// a newline, the end of the problem before it as the task data set's text
// has it, then the prompt's text, encoded; a completion is decoded, and
// ends after the first token that holds a newline (its stop tokens).
type Codec struct {
	tok   *tokenizer.Tokenizer // nil: bytes
	stops []int32
}

// Bytes is the codec of a byte-level policy: a token is a byte, and the
// newline alone stops a completion.
func Bytes() *Codec { return &Codec{stops: []int32{Newline}} }

// Tokenized is the codec of a policy that reads tok's ids: every token
// whose bytes hold a newline stops a completion.
func Tokenized(tok *tokenizer.Tokenizer) *Codec {
	c := &Codec{tok: tok}
	for id := range int32(tok.VocabSize()) {
		if bytes.IndexByte(tok.Token(id), Newline) >= 0 {
			c.stops = append(c.stops, id)
		}
	}
	return c
}

// Prompt is problem p's prompt as the policy reads it.
func (c *Codec) Prompt(p rltask.Problem) []int32 {
	if c.tok == nil {
		return Prompt(p)
	}
	return c.tok.Encode([]byte("\n" + p.Prompt))
}

// Text is a completion's tokens as text (a token outside the vocabulary
// reads as nothing: the job's bounds refuse such a completion first).
func (c *Codec) Text(tokens []int32) string {
	if c.tok == nil {
		return Text(tokens)
	}
	var b []byte
	for _, id := range tokens {
		b = append(b, c.tok.Token(id)...)
	}
	return string(b)
}

// Encode is text as the policy's tokens.
func (c *Codec) Encode(text string) []int32 {
	if c.tok == nil {
		ids := make([]int32, len(text))
		for i := range len(text) {
			ids[i] = int32(text[i])
		}
		return ids
	}
	return c.tok.Encode([]byte(text))
}

// Stops are the tokens a completion ends after.
func (c *Codec) Stops() []int32 { return c.stops }

// stopsAt reports whether tok ends a completion.
func (c *Codec) stopsAt(tok int32) bool {
	if c.tok == nil {
		return tok == Newline
	}
	return bytes.IndexByte(c.tok.Token(tok), Newline) >= 0
}
