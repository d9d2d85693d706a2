package podsources

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidationCorpus runs the differential test's corpus
// (hack/validationdiff/testdata/corpus, where the API server's own
// validation agrees with each file's name) through nodelet's checks alone,
// so the unit suite holds every verdict: valid-* pods pass, invalid-* pods
// are refused.
func TestValidationCorpus(t *testing.T) {
	files, err := filepath.Glob("../../../hack/validationdiff/testdata/corpus/*.yaml")
	if err != nil || len(files) < 50 {
		t.Fatalf("corpus: %d files (%v)", len(files), err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			pods, err := decodePods(data)
			if err != nil || len(pods) != 1 {
				t.Fatalf("decode: %v", err)
			}
			errs := Validate(pods[0], "node1")
			if valid := strings.HasPrefix(name, "valid-"); valid != (len(errs) == 0) {
				t.Errorf("named %s, nodelet says %v", name, errs)
			}
		})
	}
}
