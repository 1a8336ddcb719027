package nn

// FLOPsPerExample is the floating-point operations one training example
// costs: the forward pass's multiply-adds, two operations each, times
// three for forward and backward (the backward pass computes a gradient
// for the input and one for the weights, each as costly as the forward
// product). It counts the products that dominate: dense layers per row,
// conv2d per output position (a kernel applied at every one of them),
// attention's projections and its scores and weighted sums, which grow
// with t². Element-wise layers, biases, norms and the loss are left out:
// a few operations per value, small beside the products. It is the
// measure of volunteers' compute credit, not of any device's speed.
func (m *Model) FLOPsPerExample() float64 {
	return 6 * m.top.multiplyAdds()
}

// multiplyAdds is a stack's forward multiply-adds per example.
func (s *stack) multiplyAdds() float64 {
	total := 0.0
	for _, l := range s.layers {
		total += layerMultiplyAdds(l)
	}
	return total
}

func layerMultiplyAdds(l Layer) float64 {
	switch l := l.(type) {
	case *denseLayer:
		return float64(l.rows) * float64(l.dIn) * float64(l.dOut)
	case *convLayer:
		// Each filter's kernel (channels*k*k weights) at each output
		// position.
		return float64(l.out.c) * float64(l.colRows) * float64(l.colCols)
	case *attentionLayer:
		t, d := float64(l.t), float64(l.d)
		proj := t*d*3*d + t*d*d // q|k|v in, and out
		scores := t * t * d     // q·kᵀ over all heads: heads * t*t*dh
		mix := t * t * d        // the probabilities times v
		return proj + scores + mix
	case *residualLayer:
		return l.body.multiplyAdds()
	}
	return 0
}
