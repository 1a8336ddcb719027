package wasmsimd

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/nn"
)

// The module in the repository is the one this package writes: the
// generated binary matches its source.
func TestCheckedInModuleMatchesSource(t *testing.T) {
	got, err := os.ReadFile("../../web/static/simd.wasm")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, Module()) {
		t.Fatal("web/static/simd.wasm is not what package wasmsimd writes: run go generate ./internal/wasmsimd")
	}
}

// node runs testdata/block.js on the input words and returns C.
type nodeRunner struct {
	t         *testing.T
	node, dir string
	wasm      string
}

func newNodeRunner(t *testing.T) *nodeRunner {
	node := testenv.NeedNode(t, "the SIMD module outside a browser")
	dir := t.TempDir()
	wasm := filepath.Join(dir, "simd.wasm")
	if err := os.WriteFile(wasm, Module(), 0o644); err != nil {
		t.Fatal(err)
	}
	return &nodeRunner{t: t, node: node, dir: dir, wasm: wasm}
}

func (r *nodeRunner) run(n int, words ...any) []float32 {
	r.t.Helper()
	var in bytes.Buffer
	for _, w := range words {
		binary.Write(&in, binary.LittleEndian, w)
	}
	inPath, outPath := filepath.Join(r.dir, "in.bin"), filepath.Join(r.dir, "out.bin")
	if err := os.WriteFile(inPath, in.Bytes(), 0o644); err != nil {
		r.t.Fatal(err)
	}
	if out, err := exec.Command(r.node, "testdata/block.js", r.wasm, inPath, outPath).CombinedOutput(); err != nil {
		r.t.Fatalf("node: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(outPath)
	if err != nil {
		r.t.Fatal(err)
	}
	if len(raw) != 4*n {
		r.t.Fatalf("%d bytes of C, want %d", len(raw), 4*n)
	}
	c := make([]float32, n)
	binary.Read(bytes.NewReader(raw), binary.LittleEndian, c)
	return c
}

func randFloats(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = r.Float32()*2 - 1
	}
	return x
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i, w := range want {
		if math.Float32bits(got[i]) != math.Float32bits(w) {
			t.Fatalf("%s: C[%d] = %g, want %g", what, i, got[i], w)
		}
	}
}

// The module's block, run by Node's WebAssembly, gives nn.GoBlock's
// numbers bit for bit, on blocks with every remainder of the unrolled
// loop and the edge sizes the GEMM driver makes.
func TestBlockMatchesGoBlockUnderNode(t *testing.T) {
	node := newNodeRunner(t)
	r := rand.New(rand.NewPCG(1, 2))
	ref := nn.GoBlock(MR, NR)
	for _, sh := range [][3]int{{1, 1, 1}, {2, 1, 1}, {3, 2, 1}, {4, 1, 2}, {5, 3, 3}, {7, 24, 64}, {256, 24, 2}, {256, 2, 64}, {97, 5, 7}} {
		kb, mt, nt := sh[0], sh[1], sh[2]
		a, b := randFloats(r, kb*mt*MR), randFloats(r, kb*nt*NR)
		want := make([]float32, mt*MR*nt*NR)
		ref(kb, mt, nt, a, b, want)
		got := node.run(len(want), int32(0), [3]int32{int32(kb), int32(mt), int32(nt)}, a, b)
		sameBits(t, fmt.Sprintf("block kb %d, %d×%d tiles", kb, mt, nt), got, want)
	}
}

// The module's sparse gives nn.GoSparseBlock's numbers bit for bit, on
// rows with no non-zeros, a few, and all.
func TestSparseMatchesGoSparseBlockUnderNode(t *testing.T) {
	node := newNodeRunner(t)
	r := rand.New(rand.NewPCG(3, 4))
	for _, sh := range [][3]int{{1, 1, 1}, {3, 2, 5}, {96, 4, 256}, {17, 64, 9}} {
		mb, nt, kb := sh[0], sh[1], sh[2]
		stride := kb + 3
		vals := make([]float32, mb*stride)
		idx := make([]int32, mb*stride)
		cnt := make([]int32, mb)
		for i := range mb {
			for p := range kb {
				if i%3 == 0 || r.IntN(4) != 0 {
					continue // a row of nothing, and a quarter of the rest
				}
				vals[i*stride+int(cnt[i])] = r.Float32()*2 - 1
				idx[i*stride+int(cnt[i])] = int32(p)
				cnt[i]++
			}
		}
		if mb > 1 {
			cnt[1] = int32(kb) // one row of all its steps
			for p := range kb {
				vals[stride+p], idx[stride+p] = r.Float32(), int32(p)
			}
		}
		b := randFloats(r, kb*nt*8)
		want := make([]float32, mb*nt*8)
		nn.GoSparseBlock(mb, nt, kb, stride, vals, idx, cnt, b, want)
		got := node.run(len(want), int32(1), [4]int32{int32(mb), int32(nt), int32(kb), int32(stride)}, vals, idx, cnt, b)
		sameBits(t, fmt.Sprintf("sparse %d rows, %d panels, kb %d", mb, nt, kb), got, want)
	}
}
