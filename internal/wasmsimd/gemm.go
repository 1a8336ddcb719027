package wasmsimd

// Tile sizes of the GEMM block: 4 rows of C by 8 columns, in eight f32x4
// accumulators, so each value loaded from B is used four times and each
// of A eight. With B's two vectors and A's splat that is 11 vector
// registers, within the 16 that browsers' x64 and arm64 code have.
const (
	MR = 4
	NR = 8
)

// unroll is how many steps of p one pass of the inner loop takes.
const unroll = 4

// Locals of block: its parameters, then the rest.
const (
	lKB, lMT, lNT, lA, lB, lC = 0, 1, 2, 3, 4, 5 // parameters (i32)
	lJT, lIT, lP, lAP, lBP    = 6, 7, 8, 9, 10   // loop counters and cursors
	lCP, lLDC, lBPanel        = 11, 12, 13
	lAcc                      = 14 // eight v128 accumulators
	lB0, lB1, lAV             = lAcc + 8, lAcc + 9, lAcc + 10
)

// block is nn.BlockFunc with MR×NR tiles: block(kb, mt, nt, a, b, c), the
// last three byte addresses in memory. For each panel j of B (kb×NR at
// b + j*kb*NR*4) and each strip i of A (kb×MR at a + i*kb*MR*4), the tile
// C[i*MR.., j*NR..] = Σ_p a·b in order of p, stored at c with a row
// stride of nt*NR floats. The panel of B (8 KiB at kb = 256) stays in L1
// while the strips of A stream past it.
func block() function {
	var c code
	// ldc = nt*NR*4 bytes.
	c.get(lNT).i32c(5).shl().set(lLDC)
	c.i32c(0).set(lJT)
	c.block().loop() // over the panels of B
	{
		c.get(lJT).get(lNT).geU().brIf(1)
		c.get(lB).get(lJT).get(lKB).mul().i32c(5).shl().add().set(lBPanel)
		c.i32c(0).set(lIT)
		c.block().loop() // over the strips of A
		{
			c.get(lIT).get(lMT).geU().brIf(1)
			c.get(lA).get(lIT).get(lKB).mul().i32c(4).shl().add().set(lAP)
			c.get(lBPanel).set(lBP)
			for r := range 2 * MR {
				c.zero().set(lAcc + r)
			}
			c.get(lKB).set(lP)
			// unroll steps of p a pass while that many are left, then one.
			c.block().loop()
			{
				c.get(lP).i32c(unroll).ltU().brIf(1)
				for s := range unroll {
					c.step(uint32(s))
				}
				c.advance(unroll)
				c.br(0)
			}
			c.end().end()
			c.block().loop()
			{
				c.get(lP).eqz().brIf(1)
				c.step(0)
				c.advance(1)
				c.br(0)
			}
			c.end().end()
			// The tile's rows at c + (i*MR + r)*ldc + j*NR*4.
			c.get(lC).get(lIT).get(lLDC).mul().i32c(2).shl().add()
			c.get(lJT).i32c(5).shl().add().set(lCP)
			for r := range MR {
				c.get(lCP).get(lAcc + 2*r).store(0)
				c.get(lCP).get(lAcc + 2*r + 1).store(16)
				if r < MR-1 {
					c.get(lCP).get(lLDC).add().set(lCP)
				}
			}
			c.get(lIT).i32c(1).add().set(lIT)
			c.br(0)
		}
		c.end().end()
		c.get(lJT).i32c(1).add().set(lJT)
		c.br(0)
	}
	c.end().end()
	locals := []byte{i32, i32, i32, i32, i32, i32, i32, i32}
	for range 11 {
		locals = append(locals, v128)
	}
	return function{name: "block", params: []byte{i32, i32, i32, i32, i32, i32}, locals: locals, body: c}
}

// step is one step of p, s steps past the cursors: two vectors of B's
// row, then for each row r of the tile A's value splat and multiplied
// into both accumulators of the row (acc + a*b, not fused: the sum the
// pure-Go kernel computes, bit for bit).
func (c *code) step(s uint32) {
	c.get(lBP).load(s * NR * 4).set(lB0)
	c.get(lBP).load(s*NR*4 + 16).set(lB1)
	for r := range uint32(MR) {
		c.get(lAP).loadSplat(s*MR*4 + 4*r).set(lAV)
		acc := lAcc + 2*int(r)
		c.get(acc).get(lAV).get(lB0).fmul().fadd().set(acc)
		c.get(acc + 1).get(lAV).get(lB1).fmul().fadd().set(acc + 1)
	}
}

// advance moves the cursors n steps of p on.
func (c *code) advance(n int32) {
	c.get(lAP).i32c(n * MR * 4).add().set(lAP)
	c.get(lBP).i32c(n * NR * 4).add().set(lBP)
	c.get(lP).i32c(n).sub().set(lP)
}

// Module is the SIMD module: it imports memory env.mem and exports block
// and sparse.
func Module() []byte { return module([]function{block(), sparse()}) }

// Locals of sparse.
const (
	sMB, sNT, sKB, sStride, sVals, sIdx, sCnt, sB, sC = 0, 1, 2, 3, 4, 5, 6, 7, 8 // parameters (i32)
	sJ, sI, sT, sVP, sIP, sBPanel, sLDC, sCP, sRow    = 9, 10, 11, 12, 13, 14, 15, 16, 17
	sAcc0, sAcc1, sAV                                 = 18, 19, 20 // v128
)

// sparse is nn.SparseBlockFunc: sparse(mb, nt, kb, stride, vals, idx, cnt,
// b, c), the last five byte addresses. For each panel j of B (kb×8 at
// b + j*kb*32) and each row i < mb, the row's cnt[i] non-zeros (values at
// vals + i*stride*4, their steps at idx + i*stride*4, int32) each scale
// the 8 values of B's row at their step into two f32x4 accumulators, in
// order; the 8 sums are stored at c + (i*nt*8 + j*8)*4. Work is in
// proportion to the non-zeros: the left operand after a relu and a
// max-pool is three quarters zeros or more.
func sparse() function {
	var c code
	c.get(sNT).i32c(5).shl().set(sLDC)
	c.i32c(0).set(sJ)
	c.block().loop() // over the panels of B
	{
		c.get(sJ).get(sNT).geU().brIf(1)
		c.get(sB).get(sJ).get(sKB).mul().i32c(5).shl().add().set(sBPanel)
		c.i32c(0).set(sI)
		c.block().loop() // over the rows
		{
			c.get(sI).get(sMB).geU().brIf(1)
			c.get(sCnt).get(sI).i32c(2).shl().add().i32load(0).set(sT)
			c.get(sI).get(sStride).mul().i32c(2).shl().set(sVP) // the row's offset in vals and idx
			c.get(sVP).get(sIdx).add().set(sIP)
			c.get(sVP).get(sVals).add().set(sVP)
			c.zero().set(sAcc0)
			c.zero().set(sAcc1)
			c.block().loop() // over the row's non-zeros
			{
				c.get(sT).eqz().brIf(1)
				c.get(sVP).loadSplat(0).set(sAV)
				c.get(sBPanel).get(sIP).i32load(0).i32c(5).shl().add().set(sRow)
				c.get(sAcc0).get(sAV).get(sRow).load(0).fmul().fadd().set(sAcc0)
				c.get(sAcc1).get(sAV).get(sRow).load(16).fmul().fadd().set(sAcc1)
				c.get(sVP).i32c(4).add().set(sVP)
				c.get(sIP).i32c(4).add().set(sIP)
				c.get(sT).i32c(1).sub().set(sT)
				c.br(0)
			}
			c.end().end()
			c.get(sC).get(sI).get(sLDC).mul().add().get(sJ).i32c(5).shl().add().set(sCP)
			c.get(sCP).get(sAcc0).store(0)
			c.get(sCP).get(sAcc1).store(16)
			c.get(sI).i32c(1).add().set(sI)
			c.br(0)
		}
		c.end().end()
		c.get(sJ).i32c(1).add().set(sJ)
		c.br(0)
	}
	c.end().end()
	locals := []byte{i32, i32, i32, i32, i32, i32, i32, i32, i32, v128, v128, v128}
	params := []byte{i32, i32, i32, i32, i32, i32, i32, i32, i32}
	return function{name: "sparse", params: params, locals: locals, body: c}
}
