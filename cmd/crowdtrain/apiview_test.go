package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/coordinator"
)

// The client's copies of the API's answers (apiview.go) must read what the
// coordinator writes: every field under the same JSON name, of the same
// type, so status, sample and submit in the worker build show real values.
func TestClientViewsMatchTheAPI(t *testing.T) {
	for _, c := range []struct{ client, api any }{
		{jobView{}, coordinator.JobView{}},
		{workerView{}, coordinator.WorkerView{}},
		{volunteerView{}, coordinator.VolunteerView{}},
		{tokenView{}, coordinator.TokenView{}},
		{issuedToken{}, coordinator.IssuedToken{}},
		{submitRequest{}, coordinator.SubmitRequest{}},
		{sampleRequest{}, coordinator.SampleRequest{}},
		{sampleView{}, coordinator.Sample{}},
	} {
		matchJSON(t, reflect.TypeOf(c.client), reflect.TypeOf(c.api), reflect.TypeOf(c.client).Name())
	}
	if maxSampleTokens != coordinator.MaxSampleTokens || defaultSampleTokens != coordinator.DefaultSampleTokens ||
		defaultTemperature != coordinator.DefaultTemperature {
		t.Errorf("sample bounds %d/%d/%v, the coordinator's %d/%d/%v", maxSampleTokens, defaultSampleTokens, defaultTemperature,
			coordinator.MaxSampleTokens, coordinator.DefaultSampleTokens, coordinator.DefaultTemperature)
	}
}

// matchJSON checks that each JSON field of client is one of api's, of the
// same type (structs field by field, through pointers, slices and maps).
func matchJSON(t *testing.T, client, api reflect.Type, path string) {
	t.Helper()
	if client.Kind() != api.Kind() {
		t.Errorf("%s: the client reads a %s, the coordinator writes a %s", path, client, api)
		return
	}
	switch client.Kind() {
	case reflect.Pointer, reflect.Slice:
		matchJSON(t, client.Elem(), api.Elem(), path)
		return
	case reflect.Map:
		matchJSON(t, client.Key(), api.Key(), path+"[key]")
		matchJSON(t, client.Elem(), api.Elem(), path+"[]")
		return
	case reflect.Struct:
		if client.PkgPath() != reflect.TypeFor[jobView]().PkgPath() { // time.Time and the like: the same type
			if client != api {
				t.Errorf("%s: the client reads a %s, the coordinator writes a %s", path, client, api)
			}
			return
		}
	default:
		return
	}
	fields := jsonFields(api)
	for i := range client.NumField() {
		f := client.Field(i)
		name := jsonName(f)
		af, ok := fields[name]
		if !ok {
			t.Errorf("%s.%s: the coordinator writes no %q", path, f.Name, name)
			continue
		}
		matchJSON(t, f.Type, af.Type, path+"."+f.Name)
	}
}

// jsonFields maps JSON names to the fields of t, embedded structs' included.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	m := map[string]reflect.StructField{}
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous {
			continue
		}
		m[jsonName(f)] = f
	}
	return m
}

func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "" {
		return f.Name
	}
	return name
}
