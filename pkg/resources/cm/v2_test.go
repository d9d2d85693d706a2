package cm

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/opencontainers/cgroups"

	"github.com/nodelet/nodelet/internal/testutil"
)

// fakeKernel stands in for the cgroup v2 filesystem on a plain directory:
// a new cgroup gets cgroup.controllers (what its parent enables),
// cgroup.subtree_control and cgroup.procs, and the interface files of
// those controllers with the kernel's initial values; removing a cgroup
// removes them, and fails while it has children, as rmdir does. Writing
// a file that does not exist fails, so a wrong file name is caught.
type fakeKernel struct{ t *testing.T }

var fakeControllerFiles = map[string]map[string]string{
	"cpu":    {"cpu.weight": "100", "cpu.max": "max 100000", "cpu.stat": ""},
	"memory": {"memory.max": "max", "memory.min": "0", "memory.low": "0", "memory.high": "max", "memory.current": "0"},
	"pids":   {"pids.max": "max", "pids.current": "0"},
	"hugetlb": {"hugetlb.2MB.max": "max", "hugetlb.2MB.current": "0", "hugetlb.1GB.max": "max", "hugetlb.1GB.current": "0",
		"hugetlb.2MB.rsvd.max": "max", "hugetlb.1GB.rsvd.max": "max"},
}

func (k fakeKernel) mkdir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	enabled := k.enabled(filepath.Dir(dir))
	files := map[string]string{"cgroup.controllers": strings.Join(enabled, " "), "cgroup.subtree_control": "", "cgroup.procs": ""}
	for _, c := range enabled {
		for f, v := range fakeControllerFiles[c] {
			files[f] = v
		}
	}
	for f, v := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(v), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// enabled reads what a cgroup enables for its children ("+cpu +memory").
func (k fakeKernel) enabled(dir string) []string {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		k.t.Fatalf("parent %s is not a cgroup: %v", dir, err)
	}
	var out []string
	for _, f := range strings.Fields(string(b)) {
		out = append(out, strings.TrimPrefix(f, "+"))
	}
	sort.Strings(out)
	return out
}

func (k fakeKernel) rmdir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return syscall.ENOENT
		}
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			return syscall.EBUSY
		}
	}
	return os.RemoveAll(dir)
}

// newFakeV2 is a Manager on a fake cgroup v2 root whose top level offers
// the controllers a current kernel does.
func newFakeV2(t *testing.T, pidsLimit int64) (*Manager, string) {
	t.Helper()
	root := t.TempDir()
	for f, v := range map[string]string{"cgroup.controllers": "cpuset cpu io memory hugetlb pids rdma misc", "cgroup.subtree_control": "", "cgroup.procs": "1"} {
		testutil.Must(t, os.WriteFile(filepath.Join(root, f), []byte(v), 0o644))
	}
	m, err := newManager(unified{mount: root, dirs: fakeKernel{t}}, Options{PodPidsLimit: pidsLimit})
	testutil.Must(t, err)
	return m, root
}

func readFile(t *testing.T, root, cgroup, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, cgroup, file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestV2SetupSizesTheQoSCgroups: kubepods gets the allocatable CPU as a
// weight, memory as memory.max and processes as pids.max; best-effort the
// minimum weight; every
// level enables cpu, memory and pids for the next.
func TestV2SetupSizesTheQoSCgroups(t *testing.T) {
	m, root := newFakeV2(t, 0)
	if m.Version() != 2 {
		t.Fatalf("version %d", m.Version())
	}
	if err := m.Setup(v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("1Gi"), PIDs: resource.MustParse("4194304")}); err != nil {
		t.Fatal(err)
	}
	// The node's process capacity, as upstream sets it (issue: it stayed
	// "max").
	if got := readFile(t, root, "/kubepods", "pids.max"); got != "4194304" {
		t.Errorf("kubepods pids.max %s, want the node's PID capacity", got)
	}
	for cg, want := range map[string]string{
		"/kubepods":            "79", // 2048 shares: 1 + ((2048-2)*9999)/262142
		"/kubepods/besteffort": "1",
	} {
		if got := readFile(t, root, cg, "cpu.weight"); got != want {
			t.Errorf("%s cpu.weight %s, want %s", cg, got, want)
		}
	}
	if got := readFile(t, root, "/kubepods", "memory.max"); got != strconv.Itoa(1<<30) {
		t.Errorf("kubepods memory.max %s", got)
	}
	for _, cg := range []string{"", "/kubepods"} {
		if got := readFile(t, root, cg, "cgroup.subtree_control"); got != "+cpu +memory +pids +hugetlb" {
			t.Errorf("%s/cgroup.subtree_control %q", cg, got)
		}
	}
	if got := readFile(t, root, "/kubepods/burstable", "cgroup.controllers"); got != "cpu hugetlb memory pids" {
		t.Errorf("burstable has controllers %q", got)
	}
}

// TestV2PodCgroupLimits: a pod's cgroup carries cpu.weight from its
// requests, cpu.max and memory.max when every container is limited, and
// pids.max; a pod with an unlimited container has no memory.max.
func TestV2PodCgroupLimits(t *testing.T) {
	m, root := newFakeV2(t, 1024)
	testutil.Must(t, m.Setup(v1.ResourceList{v1.ResourceCPU: resource.MustParse("4")}))
	guaranteed := podWith("g", rr("cpu=500m,memory=64Mi", "cpu=500m,memory=64Mi"))
	burst := podWith("b", rr("cpu=250m", "memory=32Mi"), rr("cpu=250m", ""))
	for _, p := range []*v1.Pod{guaranteed, burst} {
		if m.Exists(p) {
			t.Fatalf("%s exists before creation", p.UID)
		}
		testutil.Must(t, m.EnsureExists(p))
		if !m.Exists(p) {
			t.Fatalf("%s missing after creation", p.UID)
		}
	}
	// cpuCFSQuota: false leaves the limit unenforced.
	noQuota, err := newManager(m.h, Options{NoCPUQuota: true})
	testutil.Must(t, err)
	other := podWith("q", rr("cpu=500m", "cpu=500m"))
	testutil.Must(t, noQuota.EnsureExists(other))
	if got := readFile(t, root, noQuota.PodCgroup(other), "cpu.max"); got != "max 100000" {
		t.Errorf("cpu.max with cpuCFSQuota false: %s", got)
	}
	g := m.PodCgroup(guaranteed)
	if g != "/kubepods/podg" {
		t.Fatalf("guaranteed pod cgroup %s", g)
	}
	for file, want := range map[string]string{"cpu.weight": "20", "cpu.max": "50000 100000", "memory.max": strconv.Itoa(64 << 20), "pids.max": "1024"} {
		if got := readFile(t, root, g, file); got != want {
			t.Errorf("guaranteed %s = %s, want %s", file, got, want)
		}
	}
	b := m.PodCgroup(burst)
	for file, want := range map[string]string{"cpu.weight": "20", "cpu.max": "max 100000", "memory.max": "max"} {
		if got := readFile(t, root, b, file); got != want {
			t.Errorf("burstable %s = %s, want %s", file, got, want)
		}
	}
	testutil.Must(t, m.UpdateQoS([]*v1.Pod{guaranteed, burst}))
	if got := readFile(t, root, "/kubepods/burstable", "cpu.weight"); got != "20" {
		t.Errorf("burstable class cpu.weight %s, want its pods' 500m of requests", got)
	}
	listed, err := m.PodCgroups()
	if err != nil || len(listed) != 3 || listed["b"] != b || listed["g"] != g {
		t.Fatalf("listed %v %v", listed, err)
	}
}

// TestV2DestroyRemovesThePodCgroup: the pod's cgroup goes, its class's
// stays; a cgroup with a child cannot go until the child has.
func TestV2DestroyRemovesThePodCgroup(t *testing.T) {
	m, root := newFakeV2(t, 0)
	testutil.Must(t, m.Setup(v1.ResourceList{}))
	p := podWith("e", rr("", ""))
	testutil.Must(t, m.EnsureExists(p))
	cg := m.PodCgroup(p)
	testutil.Must(t, m.h.create(cg+"/container"))
	if err := (fakeKernel{t}).rmdir(filepath.Join(root, cg)); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("the fake kernel removed a cgroup with a child: %v", err)
	}
	testutil.Must(t, m.Destroy(cg))
	if m.Exists(p) {
		t.Fatal("destroyed cgroup still exists")
	}
	if _, err := os.Stat(filepath.Join(root, "/kubepods/besteffort")); err != nil {
		t.Fatalf("the class went with the pod: %v", err)
	}
}

// TestV2WritesOnlyKernelFiles: every file in a cgroup nodelet made is one
// the kernel provides (the library creates what it writes on a fake root,
// so a wrong name would show up here as an extra file).
func TestV2WritesOnlyKernelFiles(t *testing.T) {
	m, root := newFakeV2(t, 100)
	testutil.Must(t, m.Setup(v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("1Gi")}))
	p := podWith("g", rr("cpu=1,memory=1Gi", "cpu=1,memory=1Gi"))
	testutil.Must(t, m.EnsureExists(p))
	known := map[string]bool{"cgroup.controllers": true, "cgroup.subtree_control": true, "cgroup.procs": true}
	for _, files := range fakeControllerFiles {
		for f := range files {
			known[f] = true
		}
	}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !known[d.Name()] {
			t.Errorf("nodelet wrote %s, which the kernel does not provide", path)
		}
		return nil
	})
	testutil.Must(t, err)
}

func TestMain(m *testing.M) {
	// Lets opencontainers/cgroups read and write the fake v2 roots (plain
	// directories); the v1 tests write the real cgroupfs themselves.
	cgroups.TestMode = true
	os.Exit(m.Run())
}

// Pod-level resources decide the pod's class and limit its cgroup, its
// containers unlimited.
func TestV2PodLevelResources(t *testing.T) {
	m, root := newFakeV2(t, 0)
	testutil.Must(t, m.Setup(v1.ResourceList{v1.ResourceCPU: resource.MustParse("4")}))
	p := podWith("pl", rr("", ""), rr("", ""))
	p.Spec.Resources = &v1.ResourceRequirements{Limits: v1.ResourceList{
		v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("128Mi")}}
	testutil.Must(t, m.EnsureExists(p))
	cg := m.PodCgroup(p)
	if cg != "/kubepods/podpl" {
		t.Fatalf("pod cgroup %s, want the Guaranteed class's", cg)
	}
	for file, want := range map[string]string{"cpu.max": "100000 100000", "memory.max": strconv.Itoa(128 << 20)} {
		if got := readFile(t, root, cg, file); got != want {
			t.Errorf("%s = %s, want %s", file, got, want)
		}
	}
}

// TestV2HugePages: kubepods is limited to the allocatable huge pages of
// each size, and a pod's cgroup to what it asks of each (0 of a size
// it does not ask for).
func TestV2HugePages(t *testing.T) {
	root := t.TempDir()
	for f, v := range map[string]string{"cgroup.controllers": "cpu memory hugetlb pids", "cgroup.subtree_control": "", "cgroup.procs": "1"} {
		testutil.Must(t, os.WriteFile(filepath.Join(root, f), []byte(v), 0o644))
	}
	m, err := newManager(unified{mount: root, dirs: fakeKernel{t}}, Options{HugePageSizes: []int64{2 << 20, 1 << 30}})
	testutil.Must(t, err)
	testutil.Must(t, m.Setup(v1.ResourceList{"hugepages-2Mi": resource.MustParse("64Mi")}))
	if got := readFile(t, root, "/kubepods", "hugetlb.2MB.max"); got != strconv.Itoa(64<<20) {
		t.Errorf("kubepods hugetlb.2MB.max %s", got)
	}
	p := podWith("h", rr("cpu=1,memory=64Mi,hugepages-2Mi=32Mi", "cpu=1,memory=64Mi,hugepages-2Mi=32Mi"))
	testutil.Must(t, m.EnsureExists(p))
	for file, want := range map[string]string{"hugetlb.2MB.max": strconv.Itoa(32 << 20), "hugetlb.1GB.max": "0"} {
		if got := readFile(t, root, m.PodCgroup(p), file); got != want {
			t.Errorf("pod %s = %s, want %s", file, got, want)
		}
	}
}
