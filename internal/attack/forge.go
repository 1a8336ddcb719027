package attack

import (
	"math"
	"math/rand/v2"
	"sync"
)

// scaled writes −k·h into dst.
func scaled(dst, h []float32, k float64) {
	for i, v := range h {
		dst[i] = float32(-k * float64(v))
	}
}

// meanStd returns the coordinate-wise mean and population standard
// deviation of the updates in us (all the same length, at least one).
func meanStd(us [][]float32) (mean, std []float64) {
	n := len(us[0])
	mean, std = make([]float64, n), make([]float64, n)
	for _, u := range us {
		for i, v := range u {
			mean[i] += float64(v)
		}
	}
	for i := range mean {
		mean[i] /= float64(len(us))
	}
	for _, u := range us {
		for i, v := range u {
			d := float64(v) - mean[i]
			std[i] += d * d
		}
	}
	for i := range std {
		std[i] = math.Sqrt(std[i] / float64(len(us)))
	}
	return mean, std
}

// alie writes μ − z·σ of us into dst.
func alie(dst []float32, us [][]float32, z float64) {
	mean, std := meanStd(us)
	for i := range dst {
		dst[i] = float32(mean[i] - z*std[i])
	}
}

// ipm writes −ε·μ of us into dst.
func ipm(dst []float32, us [][]float32, eps float64) {
	mean, _ := meanStd(us)
	for i := range dst {
		dst[i] = float32(-eps * mean[i])
	}
}

// flipLabels maps each label y to classes−1−y.
func flipLabels(labels []int32, classes int) {
	for i, y := range labels {
		labels[i] = int32(classes-1) - y
	}
}

// noise fills dst with Gaussian noise of L2 norm norm.
func noise(dst []float32, rng *rand.Rand, norm float64) {
	var sum float64
	for i := range dst {
		v := rng.NormFloat64()
		dst[i] = float32(v)
		sum += v * v
	}
	if sum == 0 {
		return
	}
	k := norm / math.Sqrt(sum)
	for i := range dst {
		dst[i] = float32(float64(dst[i]) * k)
	}
}

// norm is h's L2 norm.
func norm(h []float32) float64 {
	var s float64
	for _, v := range h {
		s += float64(v) * float64(v)
	}
	return math.Sqrt(s)
}

// pool holds the attackers' latest honest updates, one per attacker (the
// last two for a lone attacker, so that it has a spread), for alie and ipm.
type pool struct {
	mu     sync.Mutex
	latest map[int][]float32
	prev   []float32 // the lone attacker's previous update
}

func newPool() *pool { return &pool{latest: map[int][]float32{}} }

// add records attacker id's honest update h (copied) and returns a
// snapshot of the pool's updates.
func (p *pool) add(id int, h []float32) [][]float32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.latest[id]; ok && len(p.latest) == 1 {
		p.prev = old
	}
	p.latest[id] = append([]float32(nil), h...)
	out := make([][]float32, 0, len(p.latest)+1)
	for _, u := range p.latest {
		out = append(out, u)
	}
	if len(p.latest) == 1 && p.prev != nil {
		out = append(out, p.prev)
	}
	return out
}
