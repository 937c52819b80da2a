package main

import (
	"archive/zip"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
)

// writeModule writes a module zip as the module cache holds one.
func writeModule(t *testing.T, at string, files map[string]string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m.zip")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	for name, body := range files {
		w, err := zw.Create(at + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestNamesAreResolvedAcrossPackagesAndModules(t *testing.T) {
	api := writeModule(t, "example.com/api@v1.0.0", map[string]string{
		"v1/types.go": `package v1
const Group = "widgets.example.com"
// Finalizer is built from the group.
const WidgetFinalizer = Group + "/cleanup"
var SchemeGroupVersion = schema.GroupVersion{Group: "gadgets.example.com", Version: "v1"}
`,
	})
	ctrl := writeModule(t, "example.com/ctrl@v1.0.0", map[string]string{
		"internal/controller/widget.go": `package controller
import (
	v1 "example.com/api/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)
var gadgetFinalizerKey = v1.SchemeGroupVersion.Group
func reconcile(obj, gadget object, finalizerName string) {
	controllerutil.AddFinalizer(obj, v1.WidgetFinalizer)
	controllerutil.RemoveFinalizer(gadget, gadgetFinalizerKey)
	controllerutil.RemoveFinalizer(obj, finalizerName)
	obj.Finalizers = append(obj.Finalizers, "literal.example.com/hold")
	obj.SetFinalizers([]string{"set.example.com/hold"})
}
`,
		"internal/controller/widget_test.go": `package controller
const testFinalizer = "test.example.com/only-in-tests"
`,
		"test/e2e/fixture.go": `package e2e
const E2EFinalizer = "e2e.example.com/fixture"
`,
		"vendor/other/other.go": `package other
const VendoredFinalizer = "vendored.example.com/x"
`,
	})
	x := newIndex()
	if _, err := x.addModule(api, "example.com/api", "v1.0.0"); err != nil {
		t.Fatal(err)
	}
	st, err := x.addModule(ctrl, "example.com/ctrl", "v1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if st.files != 1 {
		t.Errorf("read %d files of the controller, want 1 (tests, e2e and vendor skipped)", st.files)
	}
	found, runtime := x.names()
	var names []string
	for n := range found {
		names = append(names, n)
	}
	sort.Strings(names)
	want := []string{
		"gadgets.example.com",
		"literal.example.com/hold",
		"set.example.com/hold",
		"widgets.example.com/cleanup",
	}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("names %v, want %v", names, want)
	}
	var keys []string
	for _, r := range runtime {
		keys = append(keys, r.Key)
	}
	if !reflect.DeepEqual(keys, []string{"internal/controller/widget.go: finalizerName"}) {
		t.Errorf("run-time sites %v", keys)
	}
}

func TestMatchesExactNamesAndPrefixes(t *testing.T) {
	for _, c := range []struct {
		pattern, name string
		want          bool
	}{
		{"a.io/x", "a.io/x", true},
		{"a.io/x", "a.io/xy", false},
		{"a.io/ces-*", "a.io/ces-team", true},
		{"a.io/ces-*", "a.io/other", false},
	} {
		if got := matches(c.pattern, c.name); got != c.want {
			t.Errorf("matches(%q, %q) = %v", c.pattern, c.name, got)
		}
	}
}
