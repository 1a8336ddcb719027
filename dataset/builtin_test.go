package dataset

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// Fashion-MNIST's files have MNIST's names, so a search would find digits:
// with MNIST found everywhere FindMNIST looks and Fashion-MNIST's directory
// empty, loading fashion-mnist fails, naming the directory and the package
// to install; mnist still loads.
func TestFashionMNISTNeverFallsBackToMNIST(t *testing.T) {
	t.Setenv(EnvData, mnistDir(t))
	empty := t.TempDir()
	t.Setenv(EnvFashionMNIST, empty)
	_, _, err := LoadBuiltin(FashionMNIST, mnistDir(t))
	if !errors.Is(err, ErrFashionMNISTNotFound) || !IsNotFound(err) {
		t.Fatalf("LoadBuiltin(fashion-mnist) = %v, want ErrFashionMNISTNotFound", err)
	}
	for _, want := range []string{empty, "$" + EnvFashionMNIST, "apt-get install dataset-fashion-mnist", MNISTTrainImages} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
	train, _, err := LoadBuiltin(MNIST, "")
	if err != nil || train.Name != "mnist-train" {
		t.Fatalf("LoadBuiltin(mnist) = %v, %v", train, err)
	}
	if _, _, err := LoadBuiltin("cifar10", ""); err == nil || !strings.Contains(err.Error(), "mnist, fashion-mnist") {
		t.Fatalf("LoadBuiltin(cifar10) = %v, want an error listing the built-in names", err)
	}
}

// Debian's dataset-fashion-mnist loads from its default place: 60000
// training and 10000 test images of 28x28 in 10 classes, and they are not
// MNIST's.
func TestFashionMNISTLoadsFromDebiansPackage(t *testing.T) {
	if _, err := os.Stat(filepath.Join(FashionMNISTDir, MNISTTrainImages+".gz")); err != nil {
		msg := "Fashion-MNIST is not installed in " + FashionMNISTDir + " (apt-get install " + FashionMNISTPackage + ")"
		testenv.Missing(t, msg)
	}
	t.Setenv(EnvFashionMNIST, "")
	train, test, err := LoadBuiltin(FashionMNIST, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		set  *Set
		name string
		n    int
	}{{train, "fashion-mnist-train", 60000}, {test, "fashion-mnist-test", 10000}} {
		if s.set.Name != s.name || s.set.N != s.n || !slices.Equal(s.set.Shape, []int{1, 28, 28}) || s.set.Classes != 10 {
			t.Errorf("got %s: N=%d %v, %d classes; want %s: N=%d [1 28 28], 10 classes",
				s.set.Name, s.set.N, s.set.Shape, s.set.Classes, s.name, s.n)
		}
		if err := s.set.Validate(); err != nil {
			t.Error(err)
		}
	}
	mnist := loadMNISTTest(t)
	if bytes.Equal(test.U8[:test.ExampleSize()], mnist.U8[:mnist.ExampleSize()]) {
		t.Fatal("Fashion-MNIST's first test image is MNIST's")
	}
}
