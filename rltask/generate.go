package rltask

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// problemStream keeps the problems' PCG streams apart from any other use of
// the same seed (model initialisation, data shuffles).
const problemStream = 0x726c7461736b0000 // "rltask\0\0"

// problemRand is the random source of problem i of seed: its own PCG, so a
// problem can be drawn without drawing those before it.
func problemRand(seed uint64, i int) *rand.Rand {
	return rand.New(rand.NewPCG(seed, problemStream^uint64(i)))
}

// addTask: "A+B=" with A and B of digits digits (no leading zero; 0..9 for
// one digit), answer the decimal sum.
type addTask struct{ digits int }

func (addTask) Name() string { return Add }

func (t addTask) Problem(seed uint64, i int) Problem {
	r := problemRand(seed, i)
	lo, hi := operandRange(t.digits)
	a := lo + r.Int64N(hi-lo+1)
	b := lo + r.Int64N(hi-lo+1)
	return Problem{
		Prompt: strconv.FormatInt(a, 10) + "+" + strconv.FormatInt(b, 10) + "=",
		Answer: strconv.FormatInt(a+b, 10),
	}
}

// operandRange is the smallest and largest integer of digits digits.
func operandRange(digits int) (lo, hi int64) {
	p := int64(1)
	for range digits - 1 {
		p *= 10
	}
	if digits == 1 {
		return 0, 9
	}
	return p, 10*p - 1
}

// reverseTask: "reverse:S=" with S of length lowercase letters, answer S
// backwards.
type reverseTask struct{ length int }

func (reverseTask) Name() string { return Reverse }

func (t reverseTask) Problem(seed uint64, i int) Problem {
	s := randomString(problemRand(seed, i), t.length, "abcdefghijklmnopqrstuvwxyz")
	rev := []byte(s)
	slices.Reverse(rev)
	return Problem{Prompt: "reverse:" + s + "=", Answer: string(rev)}
}

// sortTask: "sort:S=" with S of length decimal digits, answer S's digits
// in ascending order.
type sortTask struct{ length int }

func (sortTask) Name() string { return Sort }

func (t sortTask) Problem(seed uint64, i int) Problem {
	s := randomString(problemRand(seed, i), t.length, "0123456789")
	sorted := []byte(s)
	slices.Sort(sorted)
	return Problem{Prompt: "sort:" + s + "=", Answer: string(sorted)}
}

func randomString(r *rand.Rand, n int, alphabet string) string {
	var b strings.Builder
	b.Grow(n)
	for range n {
		b.WriteByte(alphabet[r.IntN(len(alphabet))])
	}
	return b.String()
}
