package coordinator

import "github.com/crowdtrain/crowdtrain/nn"

// labelsPerExample is how many labels the model scores per example: 1 for
// a classifier, t for a sequence model.
func labelsPerExample(m *nn.Model) int { return m.LabelsPerExample }
