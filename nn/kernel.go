package nn

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

// SgemmFunc computes C = alpha*op(A)*op(B) + beta*C on row-major float32
// matrices, where op(A) is m×k (A itself is k×m when transA), op(B) is k×n
// (B itself is n×k when transB) and C is m×n; lda, ldb and ldc are the row
// strides. It must run on the calling goroutine (no threads of its own) and
// be safe to call from several goroutines at once on different C.
type SgemmFunc func(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)

// Kernel names. Which exist depends on the platform and build tags
// (Kernels lists them); KernelOpenBLAS is registered at run time by a
// package that loads the library (worker/cpu/openblas).
const (
	KernelAVX512   = "avx512"   // amd64: 8×32 AVX-512F micro-kernel, packed operands
	KernelAVX2     = "avx2"     // amd64: 6×16 AVX2+FMA micro-kernel, packed operands
	KernelNEON     = "neon"     // arm64: 8×8 NEON (AdvSIMD) micro-kernel, packed operands
	KernelGo       = "go"       // pure Go: 4×4 register tiles, packed operands (what wasm runs)
	KernelGonum    = "gonum"    // gonum blas32 in serial tiles, skipping zero operands
	KernelOpenBLAS = "openblas" // the host's OpenBLAS, one thread
)

// EnvKernel names the environment variable that, when set, picks the GEMM
// kernel at start (a name from Kernels) instead of the first of Kernels;
// tests use it to run everything on one path, e.g. CROWDTRAIN_KERNEL=go.
const EnvKernel = "CROWDTRAIN_KERNEL"

// kernel is one way to run gemm. Packed kernels use the Workspace's
// gemmScratch; the others ignore it.
type kernel struct {
	name string
	// micro is the register-tile kernel of packed kernels (nil otherwise).
	micro *microKernel
	// sgemm runs the whole product for kernels that are not packed.
	sgemm SgemmFunc
	// skipsZeros: the kernel does less work for zero entries of A (gonum),
	// which makes the zero-skipping formulations in layers.go pay.
	skipsZeros bool
	// sparseA: run op(A) through sparseGemm when at least this share of
	// a sample of it is zero (0: never). The pure-Go kernel in wasm gains
	// from a quarter of zeros on; a SIMD kernel, several times faster on
	// dense operands, only from far more.
	sparseA float64
	// directConv: stride-1 conv2d layers take the direct convolution
	// (conv_direct.go), whose kernels come with this one.
	directConv bool
	// block computes whole packed blocks (kernel_block.go), for kernels
	// called across a boundary that costs too much per tile.
	block *blockKernel
}

var (
	kernelsMu sync.Mutex
	kernels   []*kernel // available, the default first
	active    atomic.Pointer[kernel]
)

func init() {
	kernels = append(kernels, platformKernels()...)
	goK := &kernel{name: KernelGo, micro: goMicro, sparseA: goSparseMinZeros}
	gonumK := &kernel{name: KernelGonum, sgemm: gonumGemm, skipsZeros: true}
	if goFirst {
		kernels = append(kernels, goK, gonumK)
	} else {
		kernels = append(kernels, gonumK, goK)
	}
	k := kernels[0]
	// KernelOpenBLAS exists only once worker/cpu/native has loaded the
	// library; native.UseKernel applies the variable then.
	if name := os.Getenv(EnvKernel); name != "" && name != KernelOpenBLAS {
		if kk := findKernel(name); kk != nil {
			k = kk
		} else {
			// A bad name must not silently run a different path: tests
			// that set it would then test the wrong thing.
			panic(fmt.Sprintf("nn: $%s=%q names no kernel; available: %s", EnvKernel, name, strings.Join(Kernels(), ", ")))
		}
	}
	active.Store(k)
}

func findKernel(name string) *kernel {
	for _, k := range kernels {
		if k.name == name {
			return k
		}
	}
	return nil
}

// Kernels returns the names of the GEMM kernels usable in this process,
// the default first (worker/cpu measures them instead under --kernel auto).
func Kernels() []string {
	kernelsMu.Lock()
	defer kernelsMu.Unlock()
	names := make([]string, len(kernels))
	for i, k := range kernels {
		names[i] = k.name
	}
	return names
}

// KernelName returns the name of the GEMM kernel in use.
func KernelName() string { return active.Load().name }

// UseKernel switches every later layer computation in the process to the
// named kernel. Calls already running finish on the old one.
func UseKernel(name string) error {
	kernelsMu.Lock()
	k := findKernel(name)
	kernelsMu.Unlock()
	if k == nil {
		return fmt.Errorf("nn: no GEMM kernel %q here; available: %s", name, strings.Join(Kernels(), ", "))
	}
	active.Store(k)
	return nil
}

// RegisterKernel makes an external SGEMM (a BLAS library loaded at run time)
// available under name, placed before the built-in kernels; it does not
// switch to it (UseKernel does). Registering a name again replaces it.
func RegisterKernel(name string, f SgemmFunc) {
	if f == nil {
		panic("nn: RegisterKernel: nil SgemmFunc")
	}
	register(&kernel{name: name, sgemm: f})
}

// register adds k before the built-in kernels, or in place of the kernel
// of its name.
func register(k *kernel) {
	kernelsMu.Lock()
	defer kernelsMu.Unlock()
	for i, old := range kernels {
		if old.name == k.name {
			kernels[i] = k
			if active.Load() == old {
				active.Store(k)
			}
			return
		}
	}
	kernels = append([]*kernel{k}, kernels...)
}

// Blocking of the packed kernels: B is packed kc×nc at a time (512 KiB,
// L2), A mc×kc at a time (96 KiB); one micro-panel of B (kc×nr, at most
// 32 KiB) stays in L1 while the micro-kernel sweeps A's strips past it.
// mc and nc are multiples of every micro-kernel's mr and nr.
const (
	blockK = 256
	blockM = 96
	blockN = 512
	maxMR  = 8
	maxNR  = 32
)

// gemmScratch holds the packed operands of one gemm call; one per
// Workspace, so that concurrent workspaces never share it.
type gemmScratch struct {
	// k is the kernel of the step in progress (Model.forward sets it), so
	// that one forward and backward pass run on one kernel even if
	// UseKernel is called meanwhile; nil means the active one.
	k    *kernel
	a    []float32 // blockM × blockK
	b    []float32 // blockK × blockN
	tile []float32 // one mr×nr tile, for the edges of C
	cblk []float32 // a block kernel's block of C (blockM × blockN), made at first use
	// sparseGemm: the non-zeros of each row of a block of op(A).
	spVal []float32 // blockM × blockK
	spIdx []int32   // blockM × blockK
	spN   []int32   // blockM
	// dconv: the direct convolution's buffers (conv_direct.go).
	dconv dconvScratch
}

// gemmScratchBytes is what newGemmScratch allocates.
const gemmScratchBytes = 4 * (blockM*blockK + blockK*blockN + maxMR*maxNR + blockM*blockK + blockM*blockK + blockM)

func newGemmScratch() *gemmScratch {
	return &gemmScratch{
		a:     make([]float32, blockM*blockK),
		b:     make([]float32, blockK*blockN),
		tile:  make([]float32, maxMR*maxNR),
		spVal: make([]float32, blockM*blockK),
		spIdx: make([]int32, blockM*blockK),
		spN:   make([]int32, blockM),
	}
}

// microKernel computes one mr×nr tile: C[i][j] += Σ_p a[p*mr+i]·b[p*nr+j]
// for p < k, with C at c and row stride ldc. a and b hold at least k*mr
// and k*nr values.
type microKernel struct {
	mr, nr int
	fn     func(k int, a, b, c []float32, ldc int)
	// set, if not nil, is fn writing C instead of adding to it (the first
	// pass over k when beta is 0, so C need not be cleared first).
	set func(k int, a, b, c []float32, ldc int)
}

// gemm computes C = alpha*op(A)*op(B) + beta*C (see SgemmFunc) with the
// step's kernel; s is the caller's Workspace scratch.
func gemm(s *gemmScratch, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	kn := s.kernel()
	if kn.sparseA > 0 && m > 0 && n > 0 && k > 0 && alpha != 0 && (sparseForce == 1 || sparseForce == 0 && mostlyZero(transA, m, k, a, lda, kn.sparseA)) {
		scaleC(beta, m, n, c, ldc)
		var sb SparseBlockFunc
		if kn.block != nil {
			sb = kn.block.sparse
		}
		sparseGemm(s, sb, transA, transB, m, n, k, alpha, a, lda, b, ldb, c, ldc)
		return
	}
	if kn.block != nil {
		blockGemm(kn.block, s, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if kn.micro == nil {
		kn.sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	packedGemm(kn.micro, s, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// kernel returns the kernel of the step in progress, or the active one.
func (s *gemmScratch) kernel() *kernel {
	if s.k != nil {
		return s.k
	}
	return active.Load()
}

// sparseForce overrides mostlyZero for kernels with sparseA when non-zero
// (tests use it to check both paths): 1 always takes sparseGemm, 2 never.
var sparseForce = 0

// skipZeros reports whether the step's kernel profits from zero operands.
func (s *gemmScratch) skipZeros() bool { return s.kernel().skipsZeros }

// packedGemm is the blocked GEMM around a micro-kernel (the Goto/BLIS
// scheme): both operands are copied into the contiguous, zero-padded order
// the micro-kernel reads, which also takes care of the transposes, so one
// micro-kernel serves all four cases.
func packedGemm(mk *microKernel, s *gemmScratch, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m <= 0 || n <= 0 {
		return
	}
	if k <= 0 || alpha == 0 {
		scaleC(beta, m, n, c, ldc)
		return
	}
	// With beta 0 and a storing kernel, the first pass over k writes C.
	setFirst := beta == 0 && mk.set != nil
	if !setFirst {
		scaleC(beta, m, n, c, ldc)
	}
	mr, nr := mk.mr, mk.nr
	for pc := 0; pc < k; pc += blockK {
		kb := min(blockK, k-pc)
		first := setFirst && pc == 0
		for jc := 0; jc < n; jc += blockN {
			nb := min(blockN, n-jc)
			packB(s.b, transB, b, ldb, pc, jc, kb, nb, nr)
			for ic := 0; ic < m; ic += blockM {
				mb := min(blockM, m-ic)
				packA(s.a, transA, a, lda, ic, pc, mb, kb, mr, alpha)
				for jr := 0; jr < nb; jr += nr {
					bp := s.b[jr*kb : (jr+nr)*kb]
					nj := min(nr, nb-jr)
					for ir := 0; ir < mb; ir += mr {
						ap := s.a[ir*kb : (ir+mr)*kb]
						mi := min(mr, mb-ir)
						off := (ic+ir)*ldc + jc + jr
						if mi == mr && nj == nr {
							if first {
								mk.set(kb, ap, bp, c[off:off+(mr-1)*ldc+nr], ldc)
							} else {
								mk.fn(kb, ap, bp, c[off:off+(mr-1)*ldc+nr], ldc)
							}
							continue
						}
						// Edge of C: compute the whole tile aside, add
						// (or, on a storing first pass, copy) the part
						// that exists.
						t := s.tile[:mr*nr]
						clear(t)
						mk.fn(kb, ap, bp, t, nr)
						for i := 0; i < mi; i++ {
							if first {
								copy(c[off+i*ldc:off+i*ldc+nj], t[i*nr:i*nr+nj])
							} else {
								addTo(c[off+i*ldc:off+i*ldc+nj], t[i*nr:i*nr+nj])
							}
						}
					}
				}
			}
		}
	}
}

// scaleC sets C = beta*C.
func scaleC(beta float32, m, n int, c []float32, ldc int) {
	if beta == 1 {
		return
	}
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// packA copies alpha*op(A)[ic:ic+mb, pc:pc+kb] into dst as strips of mr
// rows: strip s holds, for each p, the mr values of column p (rows past
// mb are zero).
func packA(dst []float32, transA bool, a []float32, lda, ic, pc, mb, kb, mr int, alpha float32) {
	for s0 := 0; s0 < mb; s0 += mr {
		strip := dst[s0*kb : (s0+mr)*kb]
		rows := min(mr, mb-s0)
		if rows < mr {
			clear(strip)
		}
		if transA {
			// op(A)(i, p) = a[p*lda+i]: mr contiguous values per p.
			if rows == 8 && mr == 8 && haveAsmPack {
				o := (pc)*lda + ic + s0
				packA8T(kb, a[o:], lda, strip, alpha)
				continue
			}
			if rows == 6 && mr == 6 {
				// The AVX2 kernel's strips (6x16): one run of six per p.
				for p := 0; p < kb; p++ {
					o := (pc+p)*lda + ic + s0
					src := a[o : o+6 : o+6]
					d := strip[p*6 : p*6+6 : p*6+6]
					d[0], d[1], d[2], d[3], d[4], d[5] = alpha*src[0], alpha*src[1], alpha*src[2], alpha*src[3], alpha*src[4], alpha*src[5]
				}
				continue
			}
			if rows == 8 && mr == 8 {
				for p := 0; p < kb; p++ {
					o := (pc+p)*lda + ic + s0
					src := a[o : o+8 : o+8]
					d := strip[p*8 : p*8+8 : p*8+8]
					d[0], d[1], d[2], d[3] = alpha*src[0], alpha*src[1], alpha*src[2], alpha*src[3]
					d[4], d[5], d[6], d[7] = alpha*src[4], alpha*src[5], alpha*src[6], alpha*src[7]
				}
				continue
			}
			for p := 0; p < kb; p++ {
				src := a[(pc+p)*lda+ic+s0 : (pc+p)*lda+ic+s0+rows]
				d := strip[p*mr : p*mr+rows]
				for i, v := range src {
					d[i] = alpha * v
				}
			}
			continue
		}
		if rows == 8 && mr == 8 && haveAsmPack {
			o := (ic+s0)*lda + pc
			packA8N(kb, a[o:], lda, strip, alpha)
			continue
		}
		if rows == 6 && mr == 6 {
			// Six source rows at a time, so that each p writes one
			// contiguous run of six values instead of six strided ones.
			o := (ic+s0)*lda + pc
			r0, r1, r2 := a[o:o+kb], a[o+lda:o+lda+kb], a[o+2*lda:o+2*lda+kb]
			r3, r4, r5 := a[o+3*lda:o+3*lda+kb], a[o+4*lda:o+4*lda+kb], a[o+5*lda:o+5*lda+kb]
			// All six are kb long; saying so lets the loop drop its bounds checks.
			r1, r2, r3, r4, r5 = r1[:len(r0)], r2[:len(r0)], r3[:len(r0)], r4[:len(r0)], r5[:len(r0)]
			for p := range r0 {
				d := strip[p*6 : p*6+6 : p*6+6]
				d[0], d[1], d[2], d[3], d[4], d[5] = alpha*r0[p], alpha*r1[p], alpha*r2[p], alpha*r3[p], alpha*r4[p], alpha*r5[p]
			}
			continue
		}
		if rows == 8 && mr == 8 && alpha == 1 {
			// A transpose: eight source rows at a time, so each p writes
			// one contiguous run of eight values.
			o := (ic+s0)*lda + pc
			transpose8(strip, a[o:o+kb], a[o+lda:o+lda+kb], a[o+2*lda:o+2*lda+kb], a[o+3*lda:o+3*lda+kb],
				a[o+4*lda:o+4*lda+kb], a[o+5*lda:o+5*lda+kb], a[o+6*lda:o+6*lda+kb], a[o+7*lda:o+7*lda+kb])
			continue
		}
		for i := 0; i < rows; i++ {
			src := a[(ic+s0+i)*lda+pc : (ic+s0+i)*lda+pc+kb]
			d := strip[i:]
			for p, v := range src {
				d[p*mr] = alpha * v
			}
		}
	}
}

// transpose8 writes d[p*8+i] = ri[p] for i < 8 and every p < len(r0).
func transpose8(d []float32, r0, r1, r2, r3, r4, r5, r6, r7 []float32) {
	n := len(r0)
	r1, r2, r3, r4, r5, r6, r7 = r1[:n], r2[:n], r3[:n], r4[:n], r5[:n], r6[:n], r7[:n]
	d = d[:8*n]
	for p := 0; p < n; p++ {
		q := d[p*8 : p*8+8 : p*8+8]
		q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7] = r0[p], r1[p], r2[p], r3[p], r4[p], r5[p], r6[p], r7[p]
	}
}

// packB copies op(B)[pc:pc+kb, jc:jc+nb] into dst as strips of nr
// columns: strip s holds, for each p, the nr values of row p (columns past
// nb are zero).
func packB(dst []float32, transB bool, b []float32, ldb, pc, jc, kb, nb, nr int) {
	for s0 := 0; s0 < nb; s0 += nr {
		strip := dst[s0*kb : (s0+nr)*kb]
		cols := min(nr, nb-s0)
		if cols < nr {
			clear(strip)
		}
		if !transB {
			// op(B)(p, j) = b[p*ldb+j]: nr contiguous values per p.
			if cols == 32 && nr == 32 && haveAsmPack {
				packB32(kb, b[pc*ldb+jc+s0:], ldb, strip)
				continue
			}
			for p := 0; p < kb; p++ {
				off := (pc+p)*ldb + jc + s0
				copy(strip[p*nr:p*nr+cols], b[off:off+cols])
			}
			continue
		}
		// op(B)(p, j) = b[j*ldb+p]: a transpose. Four source rows at a
		// time, so each p writes four adjacent values rather than one per
		// cache line (eight measured no faster).
		j := 0
		for ; j+4 <= cols; j += 4 {
			o := (jc+s0+j)*ldb + pc
			r0 := b[o : o+kb]
			r1 := b[o+ldb : o+ldb+kb]
			r2 := b[o+2*ldb : o+2*ldb+kb]
			r3 := b[o+3*ldb : o+3*ldb+kb]
			transpose4(strip[j:], nr, r0, r1, r2, r3)
		}
		for ; j < cols; j++ {
			src := b[(jc+s0+j)*ldb+pc : (jc+s0+j)*ldb+pc+kb]
			d := strip[j:]
			for p, v := range src {
				d[p*nr] = v
			}
		}
	}
}

// transpose4 writes d[p*stride+i] = ri[p] for i < 4 and every p < len(r0).
func transpose4(d []float32, stride int, r0, r1, r2, r3 []float32) {
	n := len(r0)
	r1, r2, r3 = r1[:n], r2[:n], r3[:n]
	for p := 0; p < n; p++ {
		q := d[p*stride : p*stride+4 : p*stride+4]
		q[0], q[1], q[2], q[3] = r0[p], r1[p], r2[p], r3[p]
	}
}
