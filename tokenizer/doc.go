// Package tokenizer is a byte-level BPE (byte-pair encoding) tokenizer for
// text and code: the vocabulary a language model reads instead of raw
// bytes.
//
// Token ids 0..255 are the 256 bytes, so every byte sequence encodes and
// Decode(Encode(x)) is x. Ids from 256 are merges learnt by Train, each
// the concatenation of two earlier tokens. Text is first cut into pieces
// (Pieces: words with their leading space, digit groups, punctuation runs,
// whitespace runs) and merges never cross a piece's boundary, as in
// GPT-2; the cut is written by hand (no regular expression package) and
// documented on Pieces.
//
// Train counts pieces, then repeatedly merges the most frequent adjacent
// pair, ties broken by the lower pair of ids, keeping pair counts up to
// date incrementally (only the words that hold a merged pair are
// re-counted), so tens of MB train in seconds and the same data always
// gives the same merges. The file format (WriteTo, Load) is a versioned
// text file with a checksum; a truncated or altered file, a duplicate
// merge or an id out of range is refused, naming the file and line.
//
// tokenizer imports only the standard library.
package tokenizer
