package kerneltunables

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeProcSys writes the tunables with their kubelet values, but for
// those in differ.
func fakeProcSys(t *testing.T, differ map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for _, tun := range Defaults {
		path := filepath.Join(root, strings.ReplaceAll(tun.Name, ".", "/"))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		v, ok := differ[tun.Name]
		if !ok {
			v = strconv.Itoa(tun.Value)
		}
		if err := os.WriteFile(path, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func read(t *testing.T, root, name string) string {
	data, err := os.ReadFile(filepath.Join(root, strings.ReplaceAll(name, ".", "/")))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// protectKernelDefaults: a node with the kubelet's values starts and
// nothing is written; one that differs is refused naming the first
// difference, and left as it was.
func TestProtect(t *testing.T) {
	root := fakeProcSys(t, nil)
	if err := Ensure(root, true); err != nil {
		t.Fatalf("a node with the kubelet's values: %v", err)
	}
	root = fakeProcSys(t, map[string]string{"kernel.panic": "0", "kernel.keys.root_maxkeys": "200"})
	err := Ensure(root, true)
	if err == nil || !strings.Contains(err.Error(), "kernel.panic is 0, the kubelet needs 10") {
		t.Fatalf("err %v, want kernel.panic named with both values", err)
	}
	if got := read(t, root, "kernel.panic"); got != "0" {
		t.Errorf("kernel.panic was changed to %s under protectKernelDefaults", got)
	}
}

// Without protectKernelDefaults the differing values are set, the others
// left alone.
func TestSetWhenNotProtected(t *testing.T) {
	root := fakeProcSys(t, map[string]string{"vm.overcommit_memory": "0", "kernel.keys.root_maxbytes": "20000"})
	if err := Ensure(root, false); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"vm.overcommit_memory": "1", "kernel.keys.root_maxbytes": "25000000", "kernel.panic": "10"} {
		if got := read(t, root, name); got != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
	}
	if err := Ensure(filepath.Join(root, "missing"), false); err == nil {
		t.Error("a missing /proc/sys was not an error")
	}
}

// Swap counts as on when /proc/swaps lists an area past its header.
func TestSwapOn(t *testing.T) {
	dir := t.TempDir()
	for content, want := range map[string]bool{
		"Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n":                                                                     false,
		"Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n/swapfile                               file\t\t1048572\t\t0\t\t-2\n": true,
	} {
		path := filepath.Join(dir, "swaps")
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if on, _, err := SwapOn(path); err != nil || on != want {
			t.Errorf("%q: %v %v, want %v", content, on, err, want)
		}
		if b, err := SwapBytes(path); err != nil || (want && b != 1048572<<10) || (!want && b != 0) {
			t.Errorf("%q: swap bytes %d %v", content, b, err)
		}
	}
	if on, _, err := SwapOn(filepath.Join(dir, "none")); on || err != nil {
		t.Errorf("no /proc/swaps: %v %v", on, err)
	}
}
