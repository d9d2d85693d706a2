// Package kerneltunables holds the kernel settings the kubelet relies on
// (how memory is overcommitted, what a panic or an OOM does, how many
// keys the root user may hold) to the values upstream's kubelet sets.
//
// With protectKernelDefaults (CIS benchmarks require it) nodelet only
// checks them and refuses to start on a node where one differs: a
// hardened node's kernel is configured by its operator, not changed by a
// daemon. Without it, nodelet sets those that differ, as upstream does.
package kerneltunables

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
)

// Tunable is a kernel setting under /proc/sys and the kubelet's value.
type Tunable struct {
	Name  string // dotted, as sysctl names it
	Value int
}

// Defaults are upstream's, in the order they are checked.
var Defaults = []Tunable{
	{"vm.overcommit_memory", 1},
	{"vm.panic_on_oom", 0},
	{"kernel.panic", 10},
	{"kernel.panic_on_oops", 1},
	{"kernel.keys.root_maxkeys", 1000000},
	{"kernel.keys.root_maxbytes", 25000000},
}

// Ensure checks the tunables under root (/proc/sys when empty): with
// protect, the first that differs is an error naming it and both values;
// without, each that differs is set and logged.
func Ensure(root string, protect bool) error {
	if root == "" {
		root = "/proc/sys"
	}
	for _, t := range Defaults {
		path := filepath.Join(root, strings.ReplaceAll(t.Name, ".", "/"))
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("reading kernel setting %s: %w", t.Name, err)
		}
		got, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			return fmt.Errorf("reading kernel setting %s: %q is not a number", t.Name, strings.TrimSpace(string(data)))
		}
		if got == t.Value {
			continue
		}
		if protect {
			return fmt.Errorf("protectKernelDefaults: kernel setting %s is %d, the kubelet needs %d; set it (sysctl -w %s=%d) or turn protectKernelDefaults off to let nodelet set it",
				t.Name, got, t.Value, t.Name, t.Value)
		}
		klog.InfoS("Setting a kernel setting to the kubelet's value", "setting", t.Name, "from", got, "to", t.Value)
		if err := os.WriteFile(path, []byte(strconv.Itoa(t.Value)), 0o644); err != nil {
			return fmt.Errorf("setting kernel setting %s to %d (protectKernelDefaults is off): %w", t.Name, t.Value, err)
		}
	}
	return nil
}

// SwapOn reports whether the node has swap enabled, from swaps
// (/proc/swaps when empty): any line past its header is a swap area.
func SwapOn(swaps string) (bool, []string, error) {
	if swaps == "" {
		swaps = "/proc/swaps"
	}
	data, err := os.ReadFile(swaps)
	if errors.Is(err, os.ErrNotExist) {
		// No swap support in the kernel at all.
		return false, nil, nil
	}
	if err != nil {
		return false, nil, fmt.Errorf("reading %s: %w", swaps, err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return len(lines) > 1, lines[1:], nil
}

// SwapBytes is the size of the swap areas /proc/swaps (or swaps) lists.
func SwapBytes(swaps string) (int64, error) {
	_, areas, err := SwapOn(swaps)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, a := range areas {
		f := strings.Fields(a)
		if len(f) < 3 {
			continue
		}
		kb, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("swap area %q: %w", a, err)
		}
		total += kb << 10
	}
	return total, nil
}
