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

// Presets are specs: the YAML docs/JOBS.md shows for fashion-cnn parses
// to exactly the built-in job.
func TestDocsShowTheFashionPresetAsItIs(t *testing.T) {
	doc, err := Parse([]byte(docsYAML(t, "name: fashion-cnn\n")))
	if err != nil {
		t.Fatalf("docs/JOBS.md's fashion-cnn: %v", err)
	}
	preset, err := Load("fashion-cnn")
	if err != nil {
		t.Fatal(err)
	}
	doc.ModelPreset = preset.ModelPreset // the doc spells the layers out
	if !reflect.DeepEqual(doc, preset) {
		t.Fatalf("docs/JOBS.md's fashion-cnn differs from the preset:\ndoc:    %+v\npreset: %+v", doc, preset)
	}
}
