package coordinator_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
)

// A spec submitted over the API names files under the coordinator's data
// root only, relative to it; a path out of it (.., absolute, a symlink) or
// bad data is a 400 naming the key, and adds no job.
func TestSubmittedSpecsReadOnlyUnderTheDataRoot(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	_, test := loadMNIST(t)
	idx := func(dir string) {
		for name, x := range map[string]*dataset.IDX{
			"img": {Dims: []int{200, 28, 28}, Data: test.U8[:200*784]},
			"lab": {Dims: []int{200}, Data: make([]byte, 200)},
		} {
			for i := range x.Data {
				if name == "lab" {
					x.Data[i] = byte(test.Labels[i])
				}
			}
			b, err := dataset.EncodeIDX(x)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	idx(filepath.Join(root, "digits"))
	idx(outside)
	if err := os.Symlink(filepath.Join(outside, "img"), filepath.Join(root, "digits", "escape")); err != nil {
		t.Fatal(err)
	}
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) {
		c.DataRoot = root
		c.LoadData = dataset.Load
	})
	spec := func(img string) map[string]string {
		return map[string]string{"spec": `{"name": "mine", "model": "mnist-mlp", "target_accuracy": 1, "eval_every": 1000000,
			"dataset": {"type": "idx", "train_images": "` + img + `", "train_labels": "digits/lab", "test_images": "digits/img", "test_labels": "digits/lab"}}`}
	}
	for img, words := range map[string][]string{
		"../" + filepath.Base(outside) + "/img": {"dataset.train_images", "outside the coordinator's data root"},
		filepath.Join(outside, "img"):           {"dataset.train_images", "outside the coordinator's data root"},
		"digits/escape":                         {"dataset.train_images", "symlink"},
		"digits/none":                           {"dataset.train_images", "does not exist"},
		"digits/lab":                            {"dataset.train_images", "labels file?"},
	} {
		code, body := g.call(http.MethodPost, "/api/v1/jobs", testAdminToken, spec(img), nil)
		var e struct{ Key, Error string }
		json.Unmarshal(body, &e)
		if code != http.StatusBadRequest || e.Key != words[0] || !strings.Contains(e.Error, words[1]) {
			t.Errorf("train_images %s: %d %s; want 400 for key %s saying %q", img, code, body, words[0], words[1])
		}
	}
	var jobs []coordinator.JobView
	if g.getJSON("/api/v1/jobs", &jobs); len(jobs) != 1 {
		t.Fatalf("%d jobs after refused submits, want 1", len(jobs))
	}
	code, body := g.call(http.MethodPost, "/api/v1/jobs", testAdminToken, spec("digits/img"), nil)
	if code != http.StatusCreated {
		t.Fatalf("a spec naming files under the root: %d %s", code, body)
	}
	var v coordinator.JobView
	json.Unmarshal(body, &v)
	realRoot, _ := filepath.EvalSymlinks(root)
	if v.Spec.Dataset.TrainImages != filepath.Join(realRoot, "digits", "img") || v.Shards != 1 {
		t.Errorf("job's dataset %+v with %d shards; want paths resolved under the root", v.Spec.Dataset, v.Shards)
	}
	// An RL job's jsonl task file is confined to the root as well.
	os.WriteFile(filepath.Join(outside, "qa.jsonl"), []byte(`{"prompt": "1+1=", "answer": "2"}`+"\n"), 0o644)
	rl := map[string]string{"spec": "name: rl\nkind: rl\nmodel: charlm-tiny\npolicy: {job: " + g.job.ID + "}\ntask: {type: jsonl, path: " + filepath.Join(outside, "qa.jsonl") + "}\n"}
	code, body = g.call(http.MethodPost, "/api/v1/jobs", testAdminToken, rl, nil)
	var e struct{ Key, Error string }
	json.Unmarshal(body, &e)
	if code != http.StatusBadRequest || e.Key != "task.path" || !strings.Contains(e.Error, "outside the coordinator's data root") {
		t.Errorf("a jsonl task outside the data root: %d %s; want 400 for key task.path", code, body)
	}
}
