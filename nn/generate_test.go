package nn

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// pick takes the argmax at temperature 0 (the first on a tie), draws by
// the softmax of logits/temperature otherwise, and repeats given the same
// rng state.
func TestPickSamplesTheSoftmax(t *testing.T) {
	logits := []float32{1, 3, 3, -2}
	if got := pick(logits, 0, nil); got != 1 {
		t.Fatalf("argmax = %d, want 1 (the first of the two largest)", got)
	}
	const temp, draws = 0.7, 200000
	rng := rand.New(rand.NewPCG(1, 2))
	counts := make([]int, len(logits))
	for range draws {
		counts[pick(logits, temp, rng)]++
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) / temp)
	}
	for i, v := range logits {
		p := math.Exp(float64(v)/temp) / sum
		got := float64(counts[i]) / draws
		if math.Abs(got-p) > 4*math.Sqrt(p*(1-p)/draws)+1e-4 {
			t.Errorf("token %d drawn %.4f of the time, want %.4f", i, got, p)
		}
	}
	a, b := rand.New(rand.NewPCG(7, 7)), rand.New(rand.NewPCG(7, 7))
	for range 100 {
		if x, y := pick(logits, 1.3, a), pick(logits, 1.3, b); x != y {
			t.Fatal("the same rng state drew different tokens")
		}
	}
}

func TestGenerateRefusesAModelThatIsNotASequenceModel(t *testing.T) {
	m, err := NewModel(ModelSpec{Input: []int{1, 2, 2}, Layers: []LayerSpec{{Type: "dense", Units: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	p := make([]float32, m.NumParams)
	_, err = m.Generate(m.NewWorkspace(1), p, []int32{1}, 4, 0, nil)
	if err == nil || !strings.Contains(err.Error(), "not a token sequence") {
		t.Fatalf("Generate on an image model: %v", err)
	}
}
