package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// spScript trains SentencePiece's BPE on argv[1] (a text file, one
// sentence a line) with a vocabulary of argv[2], then encodes each file
// named in argv[3] (a JSON list) whole and line by line, and prints the
// token counts as JSON.
const spScript = `
import json, sys, time
import sentencepiece as spm
train, vocab, held = sys.argv[1], int(sys.argv[2]), json.load(open(sys.argv[3]))
prefix = sys.argv[4]
t0 = time.time()
spm.SentencePieceTrainer.train(
    input=train, model_prefix=prefix, model_type="bpe", vocab_size=vocab,
    byte_fallback=True, character_coverage=1.0,
    normalization_rule_name="identity", remove_extra_whitespaces=False,
    allow_whitespace_only_pieces=True, split_digits=False, add_dummy_prefix=False,
    max_sentence_length=1 << 16, input_sentence_size=0,
    max_sentencepiece_length=16, num_threads=2, minloglevel=2)
secs = time.time() - t0
sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
whole = lines = 0
for path in held:
    text = open(path, encoding="utf-8").read()
    ids = sp.encode(text)
    assert sp.decode(ids) == text, path
    whole += len(ids)
    for line in text.split("\n"):
        lines += len(sp.encode(line))
print(json.dumps({"whole": whole, "lines": lines, "train_seconds": secs}))
`

// Our BPE against SentencePiece's, same vocabulary, same training files
// (every 20th training file of the Go standard library, about 4 MB), on
// the same held-out files (go-source's validation files): bytes per token,
// higher is better. SentencePiece reads its input a line at a time, so it
// never sees a newline and encodes each as a byte-fallback token; the
// second figure, line by line without the newlines, leaves that out.
func TestCompareSentencePiece(t *testing.T) {
	testenv.Long(t, "trains two tokenizers on 4 MB of Go source")
	python := testenv.NeedPython(t, "sentencepiece")
	t.Setenv(dataset.EnvGoSource, "")
	dir, err := dataset.GoSourceDir()
	if err != nil {
		testenv.Missing(t, err.Error())
	}
	tree, err := dataset.ReadTextTree(dir, dataset.GoSourceGlob, dataset.GoSourceValFraction)
	if err != nil {
		t.Fatal(err)
	}
	const vocab = 8192
	work := t.TempDir()
	var trainText []byte
	tr := NewTrainer()
	for i, f := range tree.Train {
		if i%20 == 0 {
			tr.Add(f.Data)
			trainText = append(trainText, f.Data...)
			if len(f.Data) > 0 && f.Data[len(f.Data)-1] != '\n' {
				trainText = append(trainText, '\n')
			}
		}
	}
	start := time.Now()
	tok, err := tr.Train(vocab)
	if err != nil {
		t.Fatal(err)
	}
	ourSecs := time.Since(start).Seconds()
	var held []string
	var heldBytes, lineBytes, ourWhole, ourLines int
	for _, f := range tree.Val {
		p := filepath.Join(work, "held", filepath.FromSlash(f.Rel))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
		heldBytes += len(f.Data)
		ourWhole += len(roundTrip(t, tok, f.Data))
		for _, line := range strings.Split(string(f.Data), "\n") {
			lineBytes += len(line)
			ourLines += len(tok.Encode([]byte(line)))
		}
	}
	trainFile, heldFile, script := filepath.Join(work, "train.txt"), filepath.Join(work, "held.json"), filepath.Join(work, "sp.py")
	heldJSON, _ := json.Marshal(held)
	for p, b := range map[string][]byte{trainFile: trainText, heldFile: heldJSON, script: []byte(spScript)} {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(python, script, trainFile, strconv.Itoa(vocab), heldFile, filepath.Join(work, "sp")).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			out = append(out, ee.Stderr...)
		}
		t.Fatalf("SentencePiece: %v\n%s", err, out)
	}
	var sp struct {
		Whole, Lines int
		TrainSeconds float64 `json:"train_seconds"`
	}
	if err := json.Unmarshal(out, &sp); err != nil {
		t.Fatalf("SentencePiece printed %q: %v", out, err)
	}
	ours, theirs := float64(heldBytes)/float64(ourWhole), float64(heldBytes)/float64(sp.Whole)
	oursL, theirsL := float64(lineBytes)/float64(ourLines), float64(lineBytes)/float64(sp.Lines)
	t.Logf("trained on %d bytes (%d files), vocabulary %d; held out %d files, %d bytes", len(trainText), (len(tree.Train)+19)/20, vocab, len(tree.Val), heldBytes)
	t.Logf("whole files: ours %.3f bytes/token (%d tokens, trained in %.1fs), SentencePiece %.3f (%d tokens, trained in %.1fs): %.3fx",
		ours, ourWhole, ourSecs, theirs, sp.Whole, sp.TrainSeconds, ours/theirs)
	t.Logf("line by line, newlines left out: ours %.3f, SentencePiece %.3f: %.3fx", oursL, theirsL, oursL/theirsL)
	if ours < 0.97*theirs {
		t.Errorf("ours %.3f bytes/token is under 0.97x SentencePiece's %.3f", ours, theirs)
	}
}
