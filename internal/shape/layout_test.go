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
