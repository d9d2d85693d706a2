package shape

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxSubsystems is the most entries pkg/ may have: each is a subsystem of
// the design's map, so `ls pkg` reads as that map.
const maxSubsystems = 10

// TestPkgIsTheDesignsMap keeps pkg/ to the subsystems docs/design.md
// names, and every package under them named in its package map, so a new
// package cannot land without a place on the map.
func TestPkgIsTheDesignsMap(t *testing.T) {
	design, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(design)
	subsystems, err := os.ReadDir("../../pkg")
	if err != nil {
		t.Fatal(err)
	}
	if len(subsystems) > maxSubsystems {
		t.Errorf("pkg/ has %d entries, past %d", len(subsystems), maxSubsystems)
	}
	packages := 0
	for _, s := range subsystems {
		if !s.IsDir() {
			t.Errorf("pkg/%s is not a subsystem directory", s.Name())
			continue
		}
		if !strings.Contains(doc, "`pkg/"+s.Name()+"/`") {
			t.Errorf("docs/design.md does not name the subsystem pkg/%s/", s.Name())
		}
		entries, err := os.ReadDir(filepath.Join("../../pkg", s.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range entries {
			if !p.IsDir() {
				t.Errorf("pkg/%s/%s: a subsystem holds packages only", s.Name(), p.Name())
				continue
			}
			packages++
			if !strings.Contains(doc, "`"+p.Name()+"`") {
				t.Errorf("docs/design.md's package map does not name pkg/%s/%s", s.Name(), p.Name())
			}
		}
	}
	if packages < 40 {
		t.Fatalf("found %d packages only: is ../../pkg the product tree?", packages)
	}
}

// maxImportDepth is the longest chain of nodelet packages importing one
// another in pkg/ (a package importing none of them is 1 deep), as
// docs/design.md states it.
const maxImportDepth = 5

// TestImportChainStaysShort walks pkg/'s imports and names the longest
// chain past maxImportDepth.
func TestImportChainStaysShort(t *testing.T) {
	graph := map[string][]string{}
	err := filepath.WalkDir("../../pkg", func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() || d.Name() == "testdata" {
			return err
		}
		if !hasGo(t, path) {
			return nil
		}
		rel, _ := filepath.Rel("../..", path)
		for imp := range imports(t, path) {
			if strings.HasPrefix(imp, module+"pkg/") {
				graph[filepath.ToSlash(rel)] = append(graph[filepath.ToSlash(rel)], strings.TrimPrefix(imp, module))
			}
		}
		if _, ok := graph[filepath.ToSlash(rel)]; !ok {
			graph[filepath.ToSlash(rel)] = nil
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	longest := map[string][]string{}
	var chain func(p string) []string
	chain = func(p string) []string {
		if c, ok := longest[p]; ok {
			return c
		}
		var best []string
		for _, imp := range graph[p] {
			if c := chain(imp); len(c) > len(best) {
				best = c
			}
		}
		longest[p] = append([]string{p}, best...)
		return longest[p]
	}
	var worst []string
	for p := range graph {
		if c := chain(p); len(c) > len(worst) {
			worst = c
		}
	}
	if len(graph) < 40 || len(worst) < 2 {
		t.Fatalf("%d packages, longest chain %v: is ../../pkg the product tree?", len(graph), worst)
	}
	if len(worst) > maxImportDepth {
		t.Errorf("an import chain %d deep, past %d: %s", len(worst), maxImportDepth, strings.Join(worst, " -> "))
	}
}

// hasGo tells whether dir holds a package's non-test Go files.
func hasGo(t *testing.T, dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			return true
		}
	}
	return false
}
