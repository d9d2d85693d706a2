package shape

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/nodelet/nodelet/"

// imports lists what the package in dir (test files excluded) imports.
func imports(t *testing.T, dir string) map[string]bool {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			out[path] = true
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s imports nothing: is it a package?", dir)
	}
	return out
}

// The layering docs/design.md states: instrumentation hangs below the pod
// workers (the observers register with them, they do not wrap them), and
// the sync loop drives the workers without knowing the sync scripts.
func TestLayering(t *testing.T) {
	for _, rule := range []struct{ pkg, mustNot string }{
		{"observe/instrument", "pods/podworkers"},
		{"observe/timeline", "pods/podworkers"},
		{"observe/metrics", "pods/podworkers"},
		{"observe/tracing", "pods/podworkers"},
		{"pods/kubelet", "pods/podsync"},
		{"pods/admission", "pods/kubelet"},
	} {
		if imports(t, filepath.Join("../../pkg", rule.pkg))[module+"pkg/"+rule.mustNot] {
			t.Errorf("pkg/%s imports pkg/%s", rule.pkg, rule.mustNot)
		}
	}
	// The leaf imports nothing of nodelet's.
	for path := range imports(t, "../../pkg/observe/instrument") {
		if strings.HasPrefix(path, module) {
			t.Errorf("pkg/observe/instrument imports %s", path)
		}
	}
}
