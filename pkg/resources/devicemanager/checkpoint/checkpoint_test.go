package checkpoint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUpstreamCheckpoint: the kubelet's file (written by
// hack/cluster/tools/checkpoints with upstream's code) reads, and
// nodelet writes the same bytes for the same data.
func TestUpstreamCheckpoint(t *testing.T) {
	want, err := os.ReadFile(filepath.Join("testdata", "upstream_kubelet_internal_checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := Load(filepath.Join("testdata", "upstream_kubelet_internal_checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	e := d.Entries()
	if len(e) != 1 || e[0].PodUID != "pod-a" || e[0].ResourceName != "example.com/resource" || strings.Join(e[0].DeviceIDs[NoTopology], ",") != "Dev-1,Dev-2" ||
		len(d.Registered()["example.com/resource"]) != 2 {
		t.Fatalf("read %+v", d)
	}
	got, err := New(e, d.Registered()).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != strings.TrimSpace(string(want)) {
		t.Fatalf("nodelet writes\n%s\nthe kubelet\n%s", got, want)
	}
	if _, err := Unmarshal([]byte(strings.Replace(string(want), "Dev-2", "Dev-3", 1))); err == nil {
		t.Fatal("a changed file passed its checksum")
	}
}
