package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/tokenizer"
)

// stdin is what tokenizer encode and decode read (a test's input in tests).
var stdin io.Reader = os.Stdin

const tokenizerUsage = `usage:
  crowdtrain tokenizer train --data SPEC_OR_DIR --vocab N --out FILE [--glob PATTERN] [--val-fraction F]
  crowdtrain tokenizer encode --tokenizer FILE    (text on stdin, token ids on stdout, one a line)
  crowdtrain tokenizer decode --tokenizer FILE    (token ids on stdin, one a line; text on stdout)
`

// tokenizerCmd trains, and encodes and decodes with, a byte-level BPE
// tokenizer (package tokenizer; docs/JOBS.md, "Tokenizer").
func tokenizerCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("want a subcommand: train, encode or decode\n%s", tokenizerUsage)
	}
	switch args[0] {
	case "train":
		return tokenizerTrain(ctx, args[1:], stdout, stderr)
	case "encode", "decode":
		return tokenizerCode(ctx, args[0], args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, tokenizerUsage)
		return nil
	}
	return usagef("unknown subcommand %q: want train, encode or decode\n%s", args[0], tokenizerUsage)
}

func tokenizerTrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newCLIFlags("tokenizer train", "tokenizer train --data SPEC_OR_DIR --vocab N --out FILE [--glob PATTERN] [--val-fraction F]")
	data := fs.String("data", "", "the training text: a built-in text data set ("+dataset.BibleKJV+", "+dataset.GoSource+"), a job spec FILE (.yaml, .yml, .json) whose dataset is text, a DIR (a tree of text files, --glob), or a UTF-8 text FILE; only the training split is read")
	vocab := fs.Int("vocab", 8192, fmt.Sprintf("vocabulary size `N`, the 256 bytes included (256..%d)", tokenizer.MaxVocab))
	out := fs.String("out", "", "`FILE` to write the tokenizer to")
	glob := fs.String("glob", "", "for a DIR: the files to read, by relative path (default \"**/*\": all, at any depth)")
	valFraction := fs.Float64("val-fraction", 0, fmt.Sprintf("for a DIR or a text FILE: the share held out, as a job spec's val_fraction (default %g); the tokenizer never sees it", dataset.DefaultValFraction))
	if err := fs.parse(ctx, args, stderr); err != nil {
		return err
	}
	if *data == "" || *out == "" {
		return usagef("--data and --out are required\n%s", tokenizerUsage)
	}
	if *vocab < 256 || *vocab > tokenizer.MaxVocab {
		return usagef("--vocab %d: want 256 (the bytes alone) to %d", *vocab, tokenizer.MaxVocab)
	}
	spec, err := trainingSpec(*data, *glob, *valFraction)
	if err != nil {
		return err
	}
	docs, desc, err := dataset.TrainingDocs(spec)
	if err != nil {
		return &usageError{fmt.Sprintf("--data %s: %v", *data, err)}
	}
	start := time.Now()
	tr := tokenizer.NewTrainer()
	for _, d := range docs {
		if err := ctx.Err(); err != nil {
			return err
		}
		tr.Add(d)
	}
	tok, err := tr.Train(*vocab)
	if err != nil {
		return err
	}
	if err := tok.Save(*out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "trained on %s\n%d tokens (%d merges) from %d distinct pieces in %.1fs; wrote %s\n",
		desc, tok.VocabSize(), tok.VocabSize()-256, tr.UniquePieces(), time.Since(start).Seconds(), *out)
	if tok.VocabSize() < *vocab {
		fmt.Fprintf(stderr, "crowdtrain tokenizer: only %d of the %d tokens asked for: no pair of tokens occurs %d times more; train on more text for a larger vocabulary\n",
			tok.VocabSize(), *vocab, tokenizer.MinPairCount)
	}
	return nil
}

// trainingSpec makes --data (and --glob, --val-fraction) a data spec.
func trainingSpec(data, glob string, valFraction float64) (dataset.Spec, error) {
	if slices.Contains(dataset.Builtins, data) {
		if glob != "" || valFraction != 0 {
			return dataset.Spec{}, usagef("--glob and --val-fraction apply to a DIR or text FILE, not the built-in %s", data)
		}
		return dataset.Builtin(data), nil
	}
	fi, err := os.Stat(data)
	if err != nil {
		return dataset.Spec{}, usagef("--data %s: %v; want a built-in text data set (%s, %s), a job spec file, a directory or a text file",
			data, errors.Unwrap(err), dataset.BibleKJV, dataset.GoSource)
	}
	switch ext := strings.ToLower(filepath.Ext(data)); {
	case !fi.IsDir() && (ext == ".yaml" || ext == ".yml" || ext == ".json"):
		if glob != "" || valFraction != 0 {
			return dataset.Spec{}, usagef("--glob and --val-fraction apply to a DIR or text FILE; %s says its own (dataset.glob, dataset.val_fraction)", data)
		}
		spec, err := jobspec.Load(data)
		if err != nil {
			return dataset.Spec{}, &usageError{err.Error()}
		}
		return spec.Dataset, nil
	case valFraction == 0:
		valFraction = dataset.DefaultValFraction
	}
	s := dataset.Spec{Type: dataset.TypeText, Path: data, ValFraction: valFraction}
	if fi.IsDir() {
		s.Glob = "**/*"
		if glob != "" {
			s.Glob = glob
		}
	} else if glob != "" {
		return dataset.Spec{}, usagef("--glob %s: %s is a file; a glob selects the files of a DIR", glob, data)
	}
	if err := s.Validate(); err != nil {
		return dataset.Spec{}, usagef("--data %s: %v", data, err)
	}
	return s, nil
}

// tokenizerCode runs encode or decode, stdin to stdout.
func tokenizerCode(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) error {
	fs := newCLIFlags("tokenizer "+cmd, "tokenizer "+cmd+" --tokenizer FILE   (stdin to stdout)")
	file := fs.String("tokenizer", "", "the tokenizer `FILE` (crowdtrain tokenizer train writes one)")
	if err := fs.parse(ctx, args, stderr); err != nil {
		return err
	}
	if *file == "" {
		return usagef("--tokenizer FILE is required\n%s", tokenizerUsage)
	}
	tok, err := tokenizer.Load(*file)
	if err != nil {
		return &usageError{err.Error()}
	}
	w := bufio.NewWriterSize(stdout, 64<<10)
	if cmd == "encode" {
		text, err := io.ReadAll(stdin)
		if err != nil {
			return fmt.Errorf("reading stdin: %w", err)
		}
		var line []byte
		for _, id := range tok.Encode(text) {
			line = strconv.AppendInt(line[:0], int64(id), 10)
			line = append(line, '\n')
			w.Write(line)
		}
		return w.Flush()
	}
	sc := bufio.NewScanner(stdin)
	ids := make([]int32, 0, 4096)
	for n := 1; sc.Scan(); n++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" {
			continue
		}
		id, err := strconv.ParseInt(s, 10, 32)
		if err != nil || id < 0 || int(id) >= tok.VocabSize() {
			w.Flush()
			return usagef("stdin line %d: %q is not a token id of %s (0..%d)", n, clip(s, 40), *file, tok.VocabSize()-1)
		}
		ids = append(ids, int32(id))
		if len(ids) == cap(ids) {
			b, _ := tok.Decode(ids)
			w.Write(b)
			ids = ids[:0]
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return usagef("stdin: a line longer than %d KiB; want one token id a line", bufio.MaxScanTokenSize>>10)
		}
		return fmt.Errorf("reading stdin: %w", err)
	}
	b, _ := tok.Decode(ids)
	w.Write(b)
	return w.Flush()
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
