package dataset

import "fmt"

// TrainingDocs returns the training split of a text data set as documents,
// without cutting windows: a tree's training files (ReadTextTree), or the
// training part of one text (all but its last val_fraction, as
// TextSplits cuts it), so a tokenizer learns from exactly the text a job
// on the same spec trains on, never from its validation split. desc says
// what was read, for logs.
func TrainingDocs(s Spec) (docs [][]byte, desc string, err error) {
	if err := s.Validate(); err != nil {
		return nil, "", err
	}
	if !s.IsText() {
		return nil, "", &KeyError{Key: "dataset", Problem: fmt.Sprintf("%s is not text (want %s, %s, type text or type task)", s, BibleKJV, GoSource)}
	}
	var tree *TextTree
	switch {
	case s.Type == TypeTask:
		src, err := s.taskSource()
		if err != nil {
			return nil, "", err
		}
		text, _ := src.(TaskSource).Texts()
		return [][]byte{text}, fmt.Sprintf("%s: %d bytes, the training problems", s, len(text)), nil
	case s.Name == GoSource:
		dir, err := GoSourceDir()
		if err != nil {
			return nil, "", err
		}
		if tree, err = ReadTextTree(dir, GoSourceGlob, GoSourceValFraction); err != nil {
			return nil, "", err
		}
	case s.Name == BibleKJV:
		text, err := BibleText()
		if err != nil {
			return nil, "", err
		}
		text = text[:trainCut(len(text), DefaultValFraction)]
		return [][]byte{text}, fmt.Sprintf("%s: %d bytes, the first %g of the text", BibleKJV, len(text), 1-DefaultValFraction), nil
	case s.Glob != "":
		if tree, err = ReadTextTree(s.Path, s.Glob, s.ValFraction); err != nil {
			return nil, "", err
		}
	default:
		text, err := ReadText(s.Path)
		if err != nil {
			return nil, "", err
		}
		text = text[:trainCut(len(text), s.ValFraction)]
		return [][]byte{text}, fmt.Sprintf("%s: %d bytes, the first %g of the text", s.Path, len(text), 1-s.ValFraction), nil
	}
	n := 0
	for _, f := range tree.Train {
		docs = append(docs, f.Data)
		n += len(f.Data)
	}
	return docs, fmt.Sprintf("%s: %d bytes in %d training files (%d held out, %d duplicates left out)", s, n, len(tree.Train), len(tree.Val), tree.Duplicates), nil
}

// trainCut is where TextSplits ends the training split of n bytes.
func trainCut(n int, valFraction float64) int {
	return n - int(float64(n)*valFraction)
}
