package dataset

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// Built-in data sets, by the name a job spec's `dataset` key gives.
const (
	MNIST        = "mnist"
	FashionMNIST = "fashion-mnist"
	// BibleKJV is the King James Bible as text, from Debian's bible-kjv
	// (BibleSource).
	BibleKJV = "bible-kjv"
)

// Builtins lists the built-in data set names in documentation order
// (GoSource: the Go standard library's source, gosrcsource.go).
var Builtins = []string{MNIST, FashionMNIST, BibleKJV, GoSource}

// Fashion-MNIST comes from Debian: the package installs the four IDX files,
// gzipped, under FashionMNISTDir.
const (
	FashionMNISTDir     = "/usr/share/datasets/fashion-mnist"
	FashionMNISTPackage = "dataset-fashion-mnist"
)

// EnvFashionMNIST names a directory LoadFashionMNIST reads instead of
// FashionMNISTDir (a machine without Debian's package, or a test).
const EnvFashionMNIST = "CROWDTRAIN_FASHION_MNIST"

// ErrFashionMNISTNotFound is wrapped by LoadFashionMNIST's error when its
// directory does not hold all four files.
var ErrFashionMNISTNotFound = errors.New("Fashion-MNIST files not found")

// IsNotFound reports whether err says a built-in data set's files are
// missing (rather than present but broken).
func IsNotFound(err error) bool {
	return errors.Is(err, ErrMNISTNotFound) || errors.Is(err, ErrFashionMNISTNotFound) || errors.Is(err, ErrBibleNotFound) || errors.Is(err, ErrGoSourceNotFound)
}

// LoadFashionMNIST loads Fashion-MNIST from dir, or when dir is "" from
// $CROWDTRAIN_FASHION_MNIST if set, else FashionMNISTDir. It searches
// nowhere else: Fashion-MNIST's files have
// MNIST's exact names, so the search FindMNIST does would find digits and
// train on them under the wrong name. The sets are named
// "fashion-mnist-train" and "fashion-mnist-test".
func LoadFashionMNIST(dir string) (train, test *Set, err error) {
	from := "the directory given"
	if dir == "" {
		dir, from = FashionMNISTDir, "the default"
		if d := os.Getenv(EnvFashionMNIST); d != "" {
			dir, from = d, "$"+EnvFashionMNIST
		}
	}
	if why := checkMNISTDir(dir); why != "" {
		return nil, nil, fmt.Errorf("dataset: %w in %s (%s): %s. Fix: install Debian's %s (apt-get install %s), which puts "+
			"%s, %s, %s, %s (.gz) in %s, or set $%s to a directory holding them",
			ErrFashionMNISTNotFound, dir, from, why, FashionMNISTPackage, FashionMNISTPackage,
			MNISTTrainImages, MNISTTrainLabels, MNISTTestImages, MNISTTestLabels, FashionMNISTDir, EnvFashionMNIST)
	}
	return loadIDXDir(FashionMNIST, dir)
}

// LoadBuiltin loads the built-in data set name from its own place:
// MNIST as LoadMNIST(mnistDir) (mnistDir is serve's --data), Fashion-MNIST
// as LoadFashionMNIST("").
func LoadBuiltin(name, mnistDir string) (train, test *Set, err error) {
	switch name {
	case MNIST:
		return LoadMNIST(mnistDir)
	case FashionMNIST:
		return LoadFashionMNIST("")
	}
	return nil, nil, fmt.Errorf("dataset: %q is not a built-in data set (want one of %s)", name, strings.Join(Builtins, ", "))
}
