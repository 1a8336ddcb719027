package wasmsimd

import (
	"bytes"
	"encoding/binary"
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

// The module's block, run by Node's WebAssembly, gives nn.GoBlock's
// numbers bit for bit, on blocks with every remainder of the unrolled
// loop and the edge sizes the GEMM driver makes.
func TestBlockMatchesGoBlockUnderNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node not found: install Node.js to run the SIMD module outside a browser")
	}
	dir := t.TempDir()
	wasm := filepath.Join(dir, "simd.wasm")
	if err := os.WriteFile(wasm, Module(), 0o644); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	ref := nn.GoBlock(MR, NR)
	for _, sh := range [][3]int{{1, 1, 1}, {2, 1, 1}, {3, 2, 1}, {4, 1, 2}, {5, 3, 3}, {7, 24, 64}, {256, 24, 2}, {256, 2, 64}, {97, 5, 7}} {
		kb, mt, nt := sh[0], sh[1], sh[2]
		a := make([]float32, kb*mt*MR)
		b := make([]float32, kb*nt*NR)
		for i := range a {
			a[i] = r.Float32()*2 - 1
		}
		for i := range b {
			b[i] = r.Float32()*2 - 1
		}
		want := make([]float32, mt*MR*nt*NR)
		ref(kb, mt, nt, a, b, want)

		var in bytes.Buffer
		binary.Write(&in, binary.LittleEndian, [3]int32{int32(kb), int32(mt), int32(nt)})
		binary.Write(&in, binary.LittleEndian, a)
		binary.Write(&in, binary.LittleEndian, b)
		inPath, outPath := filepath.Join(dir, "in.bin"), filepath.Join(dir, "out.bin")
		if err := os.WriteFile(inPath, in.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(node, "testdata/block.js", wasm, inPath, outPath).CombinedOutput(); err != nil {
			t.Fatalf("node: %v\n%s", err, out)
		}
		raw, err := os.ReadFile(outPath)
		if err != nil {
			t.Fatal(err)
		}
		if len(raw) != 4*len(want) {
			t.Fatalf("kb %d, %d×%d tiles: %d bytes of C, want %d", kb, mt, nt, len(raw), 4*len(want))
		}
		for i, w := range want {
			g := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			if math.Float32bits(g) != math.Float32bits(w) {
				t.Fatalf("kb %d, %d×%d tiles: C[%d] = %g, want %g", kb, mt, nt, i, g, w)
			}
		}
	}
}
