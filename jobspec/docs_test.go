package jobspec

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// docsYAML returns the ```yaml block of docs/JOBS.md that starts with
// first.
func docsYAML(t *testing.T, first string) string {
	t.Helper()
	b, err := os.ReadFile("../docs/JOBS.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(string(b), "```yaml\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if strings.HasPrefix(block, first) {
			return block
		}
	}
	t.Fatalf("docs/JOBS.md has no yaml block starting %q", first)
	return ""
}

// Presets are specs: for every built-in job, docs/JOBS.md shows a YAML
// spec that parses to exactly that job.
func TestDocsShowEveryPresetAsItIs(t *testing.T) {
	for _, name := range PresetNames() {
		doc, err := Parse([]byte(docsYAML(t, "name: "+name+"\n")))
		if err != nil {
			t.Errorf("docs/JOBS.md's %s: %v", name, err)
			continue
		}
		preset, err := Load(name)
		if err != nil {
			t.Fatal(err)
		}
		doc.ModelPreset = preset.ModelPreset // the doc spells the layers out
		if !reflect.DeepEqual(doc, preset) {
			t.Errorf("docs/JOBS.md's %s differs from the preset:\ndoc:    %+v\npreset: %+v", name, doc, preset)
		}
	}
}
