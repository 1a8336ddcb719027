package rl

import "math"

// Advantages returns each reward's advantage within its group: (r - mean)
// / (std + eps), with the group's mean and population standard deviation
// (divided by the group's size, so a group of one, or of equal rewards,
// has advantages 0: nothing to prefer).
func Advantages(rewards []float64, eps float64) []float64 {
	n := float64(len(rewards))
	var mean float64
	for _, r := range rewards {
		mean += r
	}
	mean /= n
	var v float64
	for _, r := range rewards {
		v += (r - mean) * (r - mean)
	}
	std := math.Sqrt(v / n)
	out := make([]float64, len(rewards))
	for i, r := range rewards {
		out[i] = (r - mean) / (std + eps)
	}
	return out
}
