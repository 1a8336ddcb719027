package jobspec

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/crowdtrain/crowdtrain/nn"
)

// Sweep is the `sweep` key: a hyperparameter search whose trials are the
// rest of the spec with values from Space, run as jobs of their own on
// the same grid, with ASHA stopping the weak ones early.
type Sweep struct {
	Method string      `json:"method"` // SweepGrid or SweepRandom
	Trials int         `json:"trials"` // random: how many; grid: at most this many (0: every point)
	Space  []Dimension `json:"space"`  // in the order given
	ASHA   *ASHA       `json:"asha,omitempty"`
	// Base is the spec's source without its sweep key: each trial's spec
	// is it with the trial's values, parsed afresh, so a value that
	// changes defaults (mode) gets its own.
	Base string `json:"base"`
}

// Sweep methods.
const (
	SweepGrid   = "grid"
	SweepRandom = "random"
)

// MaxTrials bounds a sweep's trials.
const MaxTrials = 256

// Dimension is one key of the search space: a list of values, or a range.
type Dimension struct {
	Path   string `json:"path"` // dotted: outer_optimizer.lr, model.layers.2.units
	Values []any  `json:"values,omitempty"`
	// A range: random draws uniformly (log: log-uniformly) in [Min, Max],
	// whole numbers when both ends are; grid takes Points values spread
	// the same way.
	Min    float64 `json:"min,omitempty"`
	Max    float64 `json:"max,omitempty"`
	Log    bool    `json:"log,omitempty"`
	Points int     `json:"points,omitempty"`
	Int    bool    `json:"int,omitempty"` // both ends whole numbers
}

// ASHA is asynchronous successive halving: at each rung (examples seen),
// a trial goes on only if its evaluation is in the best 1/Reduction of
// the trials that reached the rung.
type ASHA struct {
	Rungs     []int64 `json:"rungs"`
	Reduction float64 `json:"reduction"`
}

// DefaultReduction is ASHA's reduction factor when the spec gives none.
const DefaultReduction = 3

var (
	sweepKeys = []string{"method", "trials", "space", "asha"}
	rangeKeys = []string{"min", "max", "log", "points"}
	ashaKeys  = []string{"rungs", "reduction"}
)

func decodeSweep(val *yaml.Node, s *Spec, _ given) error {
	if err := checkKeys("sweep.", val, sweepKeys); err != nil {
		return err
	}
	sw := &Sweep{}
	for i := 0; i < len(val.Content); i += 2 {
		k, v := val.Content[i].Value, val.Content[i+1]
		switch k {
		case "method":
			sw.Method = v.Value
		case "trials":
			if err := decodeScalar(v, &sw.Trials); err != nil || sw.Trials < 1 || sw.Trials > MaxTrials {
				return Errorf("sweep.trials", "want a whole number in 1..%d, got %q", MaxTrials, v.Value)
			}
		case "space":
			dims, err := decodeSpace(v)
			if err != nil {
				return err
			}
			sw.Space = dims
		case "asha":
			a, err := decodeASHA(v)
			if err != nil {
				return err
			}
			sw.ASHA = a
		}
	}
	switch sw.Method {
	case SweepGrid, SweepRandom:
	case "":
		return Errorf("sweep.method", "is required: %s or %s", SweepGrid, SweepRandom)
	default:
		return Errorf("sweep.method", "%q is not %s or %s", sw.Method, SweepGrid, SweepRandom)
	}
	if len(sw.Space) == 0 {
		return Errorf("sweep.space", "is empty: give at least one key to search, such as {outer_optimizer.lr: {min: 0.01, max: 0.5, log: true}}")
	}
	if sw.Method == SweepRandom && sw.Trials == 0 {
		return Errorf("sweep.trials", "is required with method random: how many trials to draw")
	}
	s.Sweep = sw
	return nil
}

func decodeSpace(v *yaml.Node) ([]Dimension, error) {
	if v.Kind != yaml.MappingNode {
		return nil, Errorf("sweep.space", "want a mapping of key paths to a list of values or {min, max, log, points}")
	}
	var dims []Dimension
	for i := 0; i < len(v.Content); i += 2 {
		path, d := v.Content[i].Value, v.Content[i+1]
		key := "sweep.space." + path
		if slices.ContainsFunc(dims, func(x Dimension) bool { return x.Path == path }) {
			return nil, Errorf(key, "is given twice")
		}
		dim := Dimension{Path: path}
		switch d.Kind {
		case yaml.SequenceNode:
			if len(d.Content) == 0 {
				return nil, Errorf(key, "is an empty list: give the values to try")
			}
			for _, n := range d.Content {
				var x any
				if err := n.Decode(&x); err != nil {
					return nil, Errorf(key, "%v", cleanYAMLError(err))
				}
				dim.Values = append(dim.Values, x)
			}
		case yaml.MappingNode:
			if err := checkKeys(key+".", d, rangeKeys); err != nil {
				return nil, err
			}
			var r struct {
				Min, Max *float64
				Log      bool
				Points   int
			}
			if err := d.Decode(&r); err != nil {
				return nil, Errorf(key, "%v", cleanYAMLError(err))
			}
			if r.Min == nil || r.Max == nil {
				return nil, Errorf(key, "a range needs min and max")
			}
			dim.Min, dim.Max, dim.Log, dim.Points = *r.Min, *r.Max, r.Log, r.Points
			switch {
			case !(dim.Min < dim.Max) || math.IsInf(dim.Min, 0) || math.IsInf(dim.Max, 0):
				return nil, Errorf(key, "min (%v) must be below max (%v)", dim.Min, dim.Max)
			case dim.Log && dim.Min <= 0:
				return nil, Errorf(key, "a log range needs min > 0, got %v", dim.Min)
			case dim.Points < 0 || dim.Points > MaxTrials:
				return nil, Errorf(key+".points", "want 1..%d values for grid", MaxTrials)
			}
			dim.Int = isIntNode(d, "min") && isIntNode(d, "max")
		default:
			return nil, Errorf(key, "want a list of values or {min, max, log, points}")
		}
		dims = append(dims, dim)
	}
	return dims, nil
}

func isIntNode(m *yaml.Node, k string) bool {
	for i := 0; i < len(m.Content); i += 2 {
		if m.Content[i].Value == k {
			return m.Content[i+1].Tag == "!!int"
		}
	}
	return false
}

func decodeASHA(v *yaml.Node) (*ASHA, error) {
	if err := checkKeys("sweep.asha.", v, ashaKeys); err != nil {
		return nil, err
	}
	a := &ASHA{Reduction: DefaultReduction}
	if err := v.Decode(a); err != nil {
		return nil, Errorf("sweep.asha", "%v", cleanYAMLError(err))
	}
	if len(a.Rungs) == 0 {
		return nil, Errorf("sweep.asha.rungs", "is empty: give the examples seen at which trials are compared, such as [10000, 30000]")
	}
	for i, r := range a.Rungs {
		if r < 1 || i > 0 && r <= a.Rungs[i-1] {
			return nil, Errorf("sweep.asha.rungs", "must be positive and increasing, got %v", a.Rungs)
		}
	}
	if !(a.Reduction > 1) || a.Reduction > 100 {
		return nil, Errorf("sweep.asha.reduction", "must be above 1 (3 keeps the best third at each rung), got %v", a.Reduction)
	}
	return a, nil
}

// checkPaths checks that every path of the sweep names a key a trial may
// set (after decoding: the key table refers to decodeSweep).
func (sw *Sweep) checkPaths() error {
	for _, d := range sw.Space {
		if err := checkPath(d.Path); err != nil {
			return Errorf("sweep.space."+d.Path, "%v", err)
		}
	}
	return nil
}

// checkPath checks that a dotted path names a key a trial may set.
func checkPath(path string) error {
	parts := strings.Split(path, ".")
	top := parts[0]
	switch top {
	case "name", "sweep", "dataset":
		return fmt.Errorf("%s cannot be searched over", top)
	}
	if lookup(top) == nil {
		return fmt.Errorf("unknown key %q; a spec has %s", top, strings.Join(Keys(), ", "))
	}
	sub := map[string][]string{"outer_optimizer": outerKeys, "optimizer": outerKeys, "inner_optimizer": innerKeys, "robust": robustKeys, "requires": reqKeys}
	switch {
	case top == "model":
		if len(parts) == 1 {
			return nil // whole models, such as preset names
		}
		if parts[1] != "layers" || len(parts) != 4 {
			return fmt.Errorf("a model path is model.layers.N.KEY, such as model.layers.2.units")
		}
		if n, err := strconv.Atoi(parts[2]); err != nil || n < 0 {
			return fmt.Errorf("%q is not a layer index", parts[2])
		}
		if !slices.Contains(layerKeys, parts[3]) {
			return fmt.Errorf("unknown layer key %q; a layer has %s", parts[3], strings.Join(layerKeys, ", "))
		}
	case sub[top] != nil:
		if len(parts) != 2 || !slices.Contains(sub[top], parts[1]) {
			return fmt.Errorf("unknown key; %s has %s", top, strings.Join(sub[top], ", "))
		}
	case len(parts) > 1:
		return fmt.Errorf("%s has no keys below it", top)
	}
	return nil
}

// Point is one trial's values, by path.
type Point map[string]any

// Points draws the sweep's trials: every combination for grid (at most
// Trials), Trials draws for random, seeded by seed.
func (sw *Sweep) Points(seed int64) []Point {
	if sw.Method == SweepGrid {
		pts := []Point{{}}
		for _, d := range sw.Space {
			vals := d.gridValues()
			var next []Point
			for _, p := range pts {
				for _, v := range vals {
					q := Point{}
					for k, x := range p {
						q[k] = x
					}
					q[d.Path] = v
					next = append(next, q)
				}
			}
			pts = next
			if len(pts) > MaxTrials {
				pts = pts[:MaxTrials]
			}
		}
		if sw.Trials > 0 && len(pts) > sw.Trials {
			pts = pts[:sw.Trials]
		}
		return pts
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed5eed))
	pts := make([]Point, sw.Trials)
	for i := range pts {
		pts[i] = Point{}
		for _, d := range sw.Space {
			pts[i][d.Path] = d.draw(rng)
		}
	}
	return pts
}

func (d *Dimension) gridValues() []any {
	if d.Values != nil {
		return d.Values
	}
	n := d.Points
	if n == 0 {
		n = 3
	}
	out := make([]any, 0, n)
	for i := range n {
		f := 0.5
		if n > 1 {
			f = float64(i) / float64(n-1)
		}
		out = append(out, d.at(f))
	}
	return slices.CompactFunc(out, func(a, b any) bool { return a == b })
}

func (d *Dimension) draw(rng *rand.Rand) any {
	if d.Values != nil {
		return d.Values[rng.IntN(len(d.Values))]
	}
	return d.at(rng.Float64())
}

// at is the value a fraction f of the way through the range.
func (d *Dimension) at(f float64) any {
	v := d.Min + f*(d.Max-d.Min)
	if d.Log {
		v = math.Exp(math.Log(d.Min) + f*(math.Log(d.Max)-math.Log(d.Min)))
	}
	if d.Int {
		return int64(math.Round(v))
	}
	// Six significant digits: a trial's spec reads as its value.
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 6, 64), 64)
	return r
}

// TrialSpec is the spec of a sweep's trial: the sweep's base spec, named
// name, with p's values set at their paths. A value a key cannot take is
// an error naming the sweep's path.
func (sw *Sweep) TrialSpec(name string, p Point) (Spec, error) {
	m, err := mapping([]byte(sw.Base), "must be a mapping of keys (name, model, mode, ...)")
	if err != nil {
		return Spec{}, err
	}
	setKey(m, "name", &yaml.Node{Kind: yaml.ScalarNode, Value: name})
	removeKey(m, "sweep")
	// A path into a mapping the source leaves out (outer_optimizer.lr
	// with the mode's optimizer) starts from what the spec resolves to.
	plain, err := yaml.Marshal(m)
	if err != nil {
		return Spec{}, err
	}
	base, err := Parse(plain)
	if err != nil {
		return Spec{}, err
	}
	resolved := map[string]any{"outer_optimizer": base.OuterOptimizer, "optimizer": base.OuterOptimizer,
		"inner_optimizer": base.InnerOptimizer, "robust": base.Robust, "requires": base.Requires}
	paths := make([]string, 0, len(p))
	for k := range p {
		paths = append(paths, k)
	}
	slices.Sort(paths)
	for _, path := range paths {
		var val yaml.Node
		if err := val.Encode(p[path]); err != nil {
			return Spec{}, Errorf("sweep.space."+path, "%v", err)
		}
		parts := strings.Split(path, ".")
		if r, ok := resolved[parts[0]]; ok && len(parts) > 1 && keyIndex(m, parts[0]) < 0 {
			var n yaml.Node
			if err := n.Encode(r); err != nil {
				return Spec{}, err
			}
			setKey(m, parts[0], &n)
		}
		if err := setPath(m, parts, &val); err != nil {
			return Spec{}, Errorf("sweep.space."+path, "%v", err)
		}
	}
	out, err := yaml.Marshal(m)
	if err != nil {
		return Spec{}, err
	}
	s, err := Parse(out)
	if err != nil {
		// Name the sweep's path that set the key the trial's spec refuses.
		var se *Error
		if errors.As(err, &se) {
			for _, path := range paths {
				if path == se.Key || strings.HasPrefix(path, se.Key+".") || strings.HasPrefix(se.Key, path+".") {
					return Spec{}, Errorf("sweep.space."+path, "trial %s with %v: %s: %s", name, p[path], se.Key, se.Problem)
				}
			}
		}
		return Spec{}, fmt.Errorf("sweep trial %s %v: %w", name, map[string]any(p), err)
	}
	return s, nil
}

func keyIndex(m *yaml.Node, k string) int {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == k {
			return i
		}
	}
	return -1
}

func setKey(m *yaml.Node, k string, v *yaml.Node) {
	if i := keyIndex(m, k); i >= 0 {
		m.Content[i+1] = v
		return
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k}, v)
}

func removeKey(m *yaml.Node, k string) {
	if i := keyIndex(m, k); i >= 0 {
		m.Content = slices.Delete(m.Content, i, i+2)
	}
}

// setPath sets a dotted path under mapping m, creating mappings on the
// way; a model given as a preset name is first written out as its layers.
func setPath(m *yaml.Node, path []string, v *yaml.Node) error {
	if len(path) == 1 {
		setKey(m, path[0], v)
		return nil
	}
	i := keyIndex(m, path[0])
	if i < 0 {
		setKey(m, path[0], &yaml.Node{Kind: yaml.MappingNode})
		i = keyIndex(m, path[0])
	}
	child := m.Content[i+1]
	if path[0] == "model" {
		if child.Kind == yaml.ScalarNode {
			spec, err := nn.Preset(child.Value)
			if err != nil {
				return err
			}
			var n yaml.Node
			if err := n.Encode(spec); err != nil {
				return err
			}
			m.Content[i+1], child = &n, &n
		}
		if child.Kind == yaml.SequenceNode { // a bare list of layers
			child = &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: "layers"}, child}}
			m.Content[i+1] = child
		}
		li := keyIndex(child, "layers")
		if li < 0 {
			return fmt.Errorf("the model has no layers")
		}
		layers := child.Content[li+1]
		n, _ := strconv.Atoi(path[2])
		if layers.Kind != yaml.SequenceNode || n >= len(layers.Content) {
			return fmt.Errorf("the model has %d layers (0..%d), not a layer %d", len(layers.Content), len(layers.Content)-1, n)
		}
		setKey(layers.Content[n], path[3], v)
		return nil
	}
	if child.Kind != yaml.MappingNode {
		return fmt.Errorf("%s is not a mapping in the spec", path[0])
	}
	return setPath(child, path[1:], v)
}
