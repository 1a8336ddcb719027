package dataset

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"
)

// Options are what loading a spec needs besides the spec.
type Options struct {
	// Context is the window t of a text data set: the model's input [t].
	Context int
	// MNISTDir is where `mnist` is read from ("" searches: FindMNIST).
	MNISTDir string
	// Tokenizer, when set, encodes a text data set into its token ids
	// (Tokens16, Classes its vocabulary) before windows are cut; nil
	// keeps the bytes (Tokens8, 256).
	Tokenizer Encoder
}

// Encoder turns text into token ids below VocabSize, at most 1<<16 of
// them (a *tokenizer.Tokenizer; an interface, as package tokenizer's
// tests read data sets).
type Encoder interface {
	Encode(text []byte) []int32
	VocabSize() int
}

// A Source loads a data set's train and test (or validation) splits.
type Source interface {
	Load(o Options) (train, test *Set, err error)
}

// Source returns the loader of the spec's format. The spec must be valid.
func (s Spec) Source() (Source, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	switch {
	case s.Name == BibleKJV:
		return BibleSource{}, nil
	case s.Name == GoSource:
		return GoSourceSource{}, nil
	case s.Name != "":
		return BuiltinSource{Name: s.Name}, nil
	case s.Type == TypeIDX:
		return IDXSource{TrainImages: s.TrainImages, TrainLabels: s.TrainLabels, TestImages: s.TestImages, TestLabels: s.TestLabels}, nil
	case s.Type == TypeNPY:
		return NPYSource{TrainX: s.TrainX, TrainY: s.TrainY, TestX: s.TestX, TestY: s.TestY}, nil
	case s.Type == TypeTask:
		return s.taskSource()
	}
	return TextSource{Path: s.Path, Glob: s.Glob, ValFraction: s.ValFraction}, nil
}

// Load loads the spec's train and test splits.
func Load(s Spec, o Options) (train, test *Set, err error) {
	src, err := s.Source()
	if err != nil {
		return nil, nil, err
	}
	return src.Load(o)
}

// BuiltinSource is a built-in image data set by name (LoadBuiltin).
type BuiltinSource struct{ Name string }

func (b BuiltinSource) Load(o Options) (train, test *Set, err error) {
	return LoadBuiltin(b.Name, o.MNISTDir)
}

// IDXSource is any IDX image set: images files of (count, rows, cols) or
// (count, channels, rows, cols) bytes and labels files of (count) bytes,
// raw or gzip.
type IDXSource struct{ TrainImages, TrainLabels, TestImages, TestLabels string }

func (x IDXSource) Load(Options) (train, test *Set, err error) {
	load := func(split, imgKey, img, labKey, lab string) (*Set, error) {
		s, err := loadIDXPair("idx-"+split, imgKey, img, labKey, lab)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	if train, err = load("train", "train_images", x.TrainImages, "train_labels", x.TrainLabels); err != nil {
		return nil, nil, err
	}
	if test, err = load("test", "test_images", x.TestImages, "test_labels", x.TestLabels); err != nil {
		return nil, nil, err
	}
	if err := pairSplits(train, test, "test_images", x.TestImages, "train_images", x.TrainImages); err != nil {
		return nil, nil, err
	}
	return train, test, nil
}

// pairSplits checks that test's examples have train's shape and type and
// gives both the larger Classes.
func pairSplits(train, test *Set, testKey, testPath, trainKey, trainPath string) error {
	if !slices.Equal(train.Shape, test.Shape) || train.Elem != test.Elem {
		return &KeyError{Key: "dataset." + testKey, Problem: fmt.Sprintf("%s holds %s %s examples but %s (%s) holds %s %s: the files are from different data sets",
			testPath, test.Elem, test.ShapeString(), trainPath, trainKey, train.Elem, train.ShapeString())}
	}
	c := max(train.Classes, test.Classes)
	train.Classes, test.Classes = c, c
	return nil
}

const idxFix = "name an IDX file (the MNIST format: *-idx3-ubyte images, *-idx1-ubyte labels, raw or .gz)"

// loadIDXPair loads an images and a labels IDX file, naming the spec key
// of the file that is wrong.
func loadIDXPair(name, imgKey, imgPath, labKey, labPath string) (*Set, error) {
	img, err := readIDXPath(imgPath)
	if err != nil {
		return nil, fileError(imgKey, imgPath, err, idxFix)
	}
	lab, err := readIDXPath(labPath)
	if err != nil {
		return nil, fileError(labKey, labPath, err, idxFix)
	}
	var shape []int
	switch len(img.Dims) {
	case 3:
		shape = []int{1, img.Dims[1], img.Dims[2]}
	case 4:
		shape = slices.Clone(img.Dims[1:])
	default:
		return nil, fileError(imgKey, imgPath, fmt.Errorf("images file has dims %v; want 3 (count, rows, cols) or 4 (count, channels, rows, cols): is it a labels file?", img.Dims), "")
	}
	if len(lab.Dims) != 1 {
		return nil, fileError(labKey, labPath, fmt.Errorf("labels file has dims %v; want 1 (count): is it an images file?", lab.Dims), "")
	}
	if img.Dims[0] != lab.Dims[0] {
		return nil, &KeyError{Key: strings.TrimPrefix("dataset."+labKey, "dataset.dataset"), Problem: fmt.Sprintf("%s has %d images but %s has %d labels; the files are not a pair",
			imgPath, img.Dims[0], labPath, lab.Dims[0])}
	}
	s := &Set{Name: name, Elem: Pixels, Shape: shape, Kind: ClassLabels, N: img.Dims[0], Classes: 2, U8: img.Data, Labels: make([]int32, len(lab.Data))}
	for i, l := range lab.Data {
		s.Labels[i] = int32(l)
		s.Classes = max(s.Classes, int(l)+1)
	}
	if err := s.Validate(); err != nil {
		return nil, fileError(imgKey, imgPath, err, "")
	}
	return s, nil
}

func readIDXPath(path string) (*IDX, error) {
	f, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadIDX(f, IDXFileMaxBytes)
}

// LoadIDXPair loads an images file (3 dims N,R,C, or 4 dims N,C,R,C) and a
// labels file (1 dim N), checking N matches. Classes is max label + 1, at
// least 2.
func LoadIDXPair(name, imagesPath, labelsPath string) (*Set, error) {
	return loadIDXPair(name, "dataset", imagesPath, "dataset", labelsPath)
}

// NPYSource is NumPy arrays as numpy.save writes them: inputs uint8
// (pixels, read as p/255) or float32 (features) of shape (N, ...), labels
// of any integer dtype and shape (N,) or (N, 1).
type NPYSource struct{ TrainX, TrainY, TestX, TestY string }

const npyFix = "name a .npy file as numpy.save writes it (inputs uint8 or float32, labels integers)"

func (p NPYSource) Load(Options) (train, test *Set, err error) {
	load := func(split, xKey, xPath, yKey, yPath string) (*Set, error) {
		xa, err := ReadNPYFile(xPath)
		if err != nil {
			return nil, fileError(xKey, xPath, err, npyFix)
		}
		s := &Set{Name: "npy-" + split, Kind: ClassLabels}
		if err := npyInputs(xa, s); err != nil {
			return nil, fileError(xKey, xPath, err, "")
		}
		ya, err := ReadNPYFile(yPath)
		if err != nil {
			return nil, fileError(yKey, yPath, err, npyFix)
		}
		if s.Labels, s.Classes, err = npyLabels(ya, s.N); err != nil {
			return nil, fileError(yKey, yPath, err, "")
		}
		if err := s.Validate(); err != nil {
			return nil, fileError(xKey, xPath, err, "")
		}
		return s, nil
	}
	if train, err = load("train", "train_x", p.TrainX, "train_y", p.TrainY); err != nil {
		return nil, nil, err
	}
	if test, err = load("test", "test_x", p.TestX, "test_y", p.TestY); err != nil {
		return nil, nil, err
	}
	if err := pairSplits(train, test, "test_x", p.TestX, "train_x", p.TrainX); err != nil {
		return nil, nil, err
	}
	return train, test, nil
}

// TextSource is UTF-8 text: a file, or a directory whose regular files
// (not hidden ones, not subdirectories) are read in name order and
// concatenated, or with a Glob the tree of files it selects under the
// directory, split by file (ReadTextTree). The model reads bytes:
// vocabulary 256.
type TextSource struct {
	Path        string
	Glob        string
	ValFraction float64
}

func (t TextSource) Load(o Options) (train, test *Set, err error) {
	if t.Glob != "" {
		tree, err := ReadTextTree(t.Path, t.Glob, t.ValFraction)
		if err != nil {
			return nil, nil, err
		}
		return treeSplits("text", "dataset.path", tree, o)
	}
	text, err := ReadText(t.Path)
	if err != nil {
		return nil, nil, err
	}
	return textSplits("text", "dataset.path", text, o, t.ValFraction)
}

// ReadText reads a UTF-8 text file, or every regular file of a directory in
// name order, concatenated. Text that is not valid UTF-8 is an error naming
// the file and the byte offset.
func ReadText(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fileError("path", path, err, "name a UTF-8 text file or a directory of them")
	}
	files := []string{path}
	if !fi.IsDir() && !fi.Mode().IsRegular() {
		return nil, fileError("path", path, &NotRegularError{Path: path, Mode: fi.Mode()}, "name a UTF-8 text file or a directory of them")
	}
	if fi.IsDir() {
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, fileError("path", path, err, "")
		}
		files = files[:0]
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".") {
				continue
			}
			info, err := os.Stat(filepath.Join(path, e.Name()))
			if err == nil && info.Mode().IsRegular() {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
		slices.Sort(files)
		if len(files) == 0 {
			return nil, fileError("path", path, errors.New("the directory holds no files"), "put UTF-8 text files in it, or name a file")
		}
	}
	var text []byte
	for _, f := range files {
		b, err := readRegular(f)
		if err != nil {
			return nil, fileError("path", f, err, "")
		}
		if err := checkUTF8(b); err != nil {
			return nil, fileError("path", f, err, "convert it to UTF-8 (iconv -f LATIN1 -t UTF-8, say) or leave it out")
		}
		text = append(text, b...)
	}
	return text, nil
}

// checkUTF8 returns an error naming the first invalid byte's offset.
func checkUTF8(b []byte) error {
	if utf8.Valid(b) {
		return nil
	}
	for off := 0; off < len(b); {
		r, n := utf8.DecodeRune(b[off:])
		if r == utf8.RuneError && n <= 1 {
			return fmt.Errorf("not UTF-8 text: invalid byte 0x%02x at offset %d", b[off], off)
		}
		off += n
	}
	return errors.New("not UTF-8 text")
}

// TextSplits cuts text into a training split (all but the last
// valFraction) and a validation split (the last valFraction), each as
// windows of t+1 bytes starting at multiples of t: input the first t bytes,
// labels the next t. key names the spec key errors blame.
func TextSplits(name, key string, text []byte, t int, valFraction float64) (train, val *Set, err error) {
	return textSplits(name, key, text, Options{Context: t}, valFraction)
}

// textSplits is TextSplits with o's context and tokenizer: the split is by
// bytes, then each side is encoded.
func textSplits(name, key string, text []byte, o Options, valFraction float64) (train, val *Set, err error) {
	if o.Context < 1 {
		return nil, nil, &KeyError{Key: "model.input", Problem: fmt.Sprintf("a text data set needs a model input of [t] (the context, e.g. [128]); got a context of %d", o.Context)}
	}
	if !(valFraction > 0 && valFraction <= 0.5) {
		return nil, nil, &KeyError{Key: "dataset.val_fraction", Problem: fmt.Sprintf("must be in (0, 0.5], got %v", valFraction)}
	}
	cut := trainCut(len(text), valFraction)
	return textSets(name, key, text[:cut:cut], text[cut:], len(text), o)
}

// TreeSplits makes a text tree's training and held-out files into windows
// of t+1 bytes as TextSplits does, each split's files concatenated in path
// order.
func TreeSplits(name, key string, tree *TextTree, t int) (train, val *Set, err error) {
	return treeSplits(name, key, tree, Options{Context: t})
}

func treeSplits(name, key string, tree *TextTree, o Options) (train, val *Set, err error) {
	if o.Context < 1 {
		return nil, nil, &KeyError{Key: "model.input", Problem: fmt.Sprintf("a text data set needs a model input of [t] (the context, e.g. [128]); got a context of %d", o.Context)}
	}
	tr, va := Text(tree.Train), Text(tree.Val)
	return textSets(name, key, tr, va, len(tr)+len(va), o)
}

// textSets cuts the training and validation texts into windows of t+1
// tokens starting at multiples of t; total is the bytes of both, for
// errors. Without a tokenizer the tokens are the bytes; with one, each
// text is encoded once here, so shards carry token ids and no worker
// needs the tokenizer.
func textSets(name, key string, trainText, valText []byte, total int, o Options) (train, val *Set, err error) {
	t := o.Context
	mk := func(split string, b []byte) (*Set, error) {
		s := &Set{Name: name + "-" + split, Elem: Tokens8, Shape: []int{t}, Kind: NextTokens, Classes: 256, U8: b, Stride: t}
		n, unit := len(b), "bytes"
		if o.Tokenizer != nil {
			ids := o.Tokenizer.Encode(b)
			u16 := make([]uint16, len(ids))
			for i, id := range ids {
				u16[i] = uint16(id) // ids are below the vocabulary, at most 1<<16; Validate checks
			}
			s.Elem, s.Classes, s.U8, s.U16 = Tokens16, o.Tokenizer.VocabSize(), nil, u16
			n, unit = len(u16), fmt.Sprintf("tokens (%d bytes)", len(b))
		}
		if n > t {
			s.N = (n - 1) / t
		}
		if s.N < 1 {
			return nil, &KeyError{Key: key, Problem: fmt.Sprintf("the %s split holds %d %s of the %d bytes; a window needs context+1 = %d tokens: the context (model input [%d]) is longer than the data. Use more text, a shorter context, or a larger val_fraction",
				split, n, unit, total, t+1, t)}
		}
		return s, s.Validate()
	}
	if train, err = mk("train", trainText); err != nil {
		return nil, nil, err
	}
	if val, err = mk("validation", valText); err != nil {
		return nil, nil, err
	}
	return train, val, nil
}
