package csi

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nodelet/nodelet/pkg/resources/pluginwatcher"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/csitest"
	"github.com/nodelet/nodelet/internal/kubeclienttest"
	"github.com/nodelet/nodelet/internal/testutil"
)

// shortDir is a temporary directory with a short path: unix socket paths
// are limited to 108 bytes.
// runWatched runs the registry with the plugin watcher that hands it
// its drivers, as the composition root does.
func runWatched(ctx context.Context, r *Registry, root string, clk *testingclock.FakeClock) error {
	w := pluginwatcher.New(pluginwatcher.Options{RootDir: root, Clock: clk, Handlers: map[string]pluginwatcher.Handler{registerapi.CSIPlugin: r}})
	var g errgroup.Group
	g.Go(func() error { return w.Run(ctx) })
	g.Go(func() error { return r.Run(ctx) })
	return g.Wait()
}

func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "csi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A test that leaves a volume published (its driver gone) must
		// not leave the mount behind, nor remove through it.
		unmountUnder(t, dir)
		os.RemoveAll(dir)
	})
	return dir
}

// unmountUnder unmounts every mount point under dir, deepest first.
func unmountUnder(t *testing.T, dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var mounts []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			mounts = append(mounts, f[4])
		}
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := syscall.Unmount(mounts[i], 0); err != nil {
			t.Errorf("unmounting %s: %v", mounts[i], err)
		}
	}
}

func startDriver(t *testing.T, o csitest.Options) *csitest.Driver {
	t.Helper()
	if o.Dir == "" {
		o.Dir = filepath.Join(shortDir(t), "drv")
		if err := os.MkdirAll(o.Dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d, err := csitest.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d
}

// A driver registers through its socket: nodelet asks it about the node,
// writes the CSINode object, the node's topology labels and node ID, and
// tells the driver. A driver whose socket goes is forgotten, and
// registers again when it comes back. A plugin of another type is
// refused, and told why.
func TestRegistration(t *testing.T) {
	root := shortDir(t)
	client := fake.NewSimpleClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid"}})
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	r := NewRegistry(RegistryOptions{RootDir: root, Nodes: APINodes{Client: kubeclienttest.Wrap(client), NodeName: "n1"}, Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- runWatched(ctx, r, root, clk) }()
	defer func() { cancel(); <-done }()
	testutil.WaitFor(t, "the registration directory", func() bool { _, err := os.Stat(r.Dir()); return err == nil && clk.HasWaiters() })

	d := startDriver(t, csitest.Options{Name: "hostpath.test", RegistryDir: r.Dir(), Stage: true, MaxVols: 8,
		Topology: map[string]string{"topology.hostpath.test/zone": "z1"}})
	bad := startDriver(t, csitest.Options{Name: "gpu.test", RegistryDir: r.Dir(), Type: "DevicePlugin"})
	step := func() { clk.Step(time.Second) }
	testutil.WaitFor(t, "the driver to register", func() bool { step(); return len(r.Drivers()) == 1 && len(d.Statuses()) > 0 && len(bad.Statuses()) > 0 })
	if s := d.Statuses(); len(s) != 1 || !s[0].PluginRegistered {
		t.Errorf("driver told %+v", s)
	}
	if s := bad.Statuses()[0]; s.PluginRegistered || !strings.Contains(s.Error, "DevicePlugin") {
		t.Errorf("plugin of another type told %+v", s)
	}
	drv, err := r.Driver("hostpath.test")
	if err != nil || !drv.Stages || drv.NodeID != "node-id-hostpath.test" {
		t.Fatalf("driver %+v, %v", drv, err)
	}
	cn, err := client.StorageV1().CSINodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cn.Spec.Drivers) != 1 || cn.Spec.Drivers[0].NodeID != "node-id-hostpath.test" || *cn.Spec.Drivers[0].Allocatable.Count != 8 ||
		cn.Spec.Drivers[0].TopologyKeys[0] != "topology.hostpath.test/zone" || cn.OwnerReferences[0].UID != "node-uid" {
		t.Errorf("CSINode %+v", cn)
	}
	node, _ := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if node.Labels["topology.hostpath.test/zone"] != "z1" || node.Annotations[NodeIDAnnotation] != `{"hostpath.test":"node-id-hostpath.test"}` {
		t.Errorf("node labels %v, annotations %v", node.Labels, node.Annotations)
	}

	if err := d.Deregister(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the driver to be forgotten", func() bool { step(); return len(r.Drivers()) == 0 })
	if _, err := r.Driver("hostpath.test"); !errors.Is(err, ErrNotRegistered) {
		t.Errorf("a gone driver: %v", err)
	}
	// The API is told after the driver is forgotten.
	testutil.WaitFor(t, "the driver to leave the CSINode object and the node", func() bool {
		cn, _ = client.StorageV1().CSINodes().Get(ctx, "n1", metav1.GetOptions{})
		node, _ = client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		return len(cn.Spec.Drivers) == 0 && node.Annotations[NodeIDAnnotation] == ""
	})
	if err := d.Register(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the driver to register again", func() bool { step(); return len(r.Drivers()) == 1 })
}

// Sockets in subdirectories register, as with upstream's plugin watcher;
// a dot-named directory (a driver's files in the making) is passed over.
func TestRegistrationInSubdirectories(t *testing.T) {
	root := shortDir(t)
	client := fake.NewSimpleClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	r := NewRegistry(RegistryOptions{RootDir: root, Nodes: APINodes{Client: kubeclienttest.Wrap(client), NodeName: "n1"}, Clock: clk})
	for _, dir := range []string{".tmp", "sub"} {
		testutil.Must(t, os.MkdirAll(filepath.Join(r.Dir(), dir), 0o750))
	}
	hidden := startDriver(t, csitest.Options{Name: "hidden.test", RegistryDir: filepath.Join(r.Dir(), ".tmp")})
	d := startDriver(t, csitest.Options{Name: "sub.test", RegistryDir: filepath.Join(r.Dir(), "sub")})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- runWatched(ctx, r, root, clk) }()
	defer func() { cancel(); <-done }()
	testutil.WaitFor(t, "the driver in a subdirectory to register", func() bool { clk.Step(time.Second); return len(d.Statuses()) > 0 })
	// The walk passes ".tmp" before "sub": it was passed over.
	if got := r.Drivers(); len(got) != 1 || got[0] != "sub.test" || len(hidden.Statuses()) != 0 {
		t.Errorf("drivers %v, the hidden one told %v", got, hidden.Statuses())
	}
}

// Registered while the API server cannot be asked (nodelet restarted
// during an outage), a driver serves the node's volumes at once; its
// CSINode entry is written once the API server answers, and so is its
// removal.
func TestRegistrationWhileTheAPIIsDown(t *testing.T) {
	root := shortDir(t)
	client := fake.NewSimpleClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	var down atomic.Bool
	down.Store(true)
	client.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	r := NewRegistry(RegistryOptions{RootDir: root, Nodes: APINodes{Client: kubeclienttest.Wrap(client), NodeName: "n1"}, Clock: clk})
	testutil.Must(t, os.MkdirAll(r.Dir(), 0o750))
	d := startDriver(t, csitest.Options{Name: "hostpath.test", RegistryDir: r.Dir()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- runWatched(ctx, r, root, clk) }()
	defer func() { cancel(); <-done }()
	testutil.WaitFor(t, "the driver to register", func() bool { clk.Step(time.Second); return len(d.Statuses()) > 0 })
	if _, err := r.Driver("hostpath.test"); err != nil || !d.Statuses()[0].PluginRegistered {
		t.Fatalf("driver: %v, told %+v", err, d.Statuses())
	}
	csiNodeDrivers := func() int {
		cn, err := client.StorageV1().CSINodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			return -1
		}
		return len(cn.Spec.Drivers)
	}
	down.Store(false)
	testutil.WaitFor(t, "the CSINode entry", func() bool { clk.Step(time.Second); return csiNodeDrivers() == 1 })

	down.Store(true)
	testutil.Must(t, d.Deregister())
	testutil.WaitFor(t, "the driver to be forgotten", func() bool { clk.Step(time.Second); return len(r.Drivers()) == 0 })
	down.Store(false)
	testutil.WaitFor(t, "the CSINode entry to go", func() bool { clk.Step(time.Second); return csiNodeDrivers() == 0 })
}

// A driver started again between two scans makes a new socket at the
// same path: it registers again, and what it says now counts.
func TestReplacedSocketRegistersAgain(t *testing.T) {
	root := shortDir(t)
	client := fake.NewSimpleClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	r := NewRegistry(RegistryOptions{RootDir: root, Nodes: APINodes{Client: kubeclienttest.Wrap(client), NodeName: "n1"}, Clock: clk})
	testutil.Must(t, os.MkdirAll(r.Dir(), 0o750))
	first := startDriver(t, csitest.Options{Name: "hostpath.test", RegistryDir: r.Dir(), NodeID: "first"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- runWatched(ctx, r, root, clk) }()
	defer func() { cancel(); <-done }()
	testutil.WaitFor(t, "the first driver to register", func() bool { clk.Step(time.Second); return len(first.Statuses()) > 0 })

	// No scan runs meanwhile: the clock stands still until it is stepped.
	first.Stop()
	second := startDriver(t, csitest.Options{Name: "hostpath.test", RegistryDir: r.Dir(), NodeID: "second"})
	testutil.WaitFor(t, "the second driver to register", func() bool { clk.Step(time.Second); return len(second.Statuses()) > 0 })
	if d, err := r.Driver("hostpath.test"); err != nil || d.NodeID != "second" {
		t.Errorf("driver %+v, %v", d, err)
	}
}

// fakeAPI holds CSIDriver objects, attachments and secrets.
type fakeAPI struct {
	drivers     map[string]*storagev1.CSIDriver
	attachments map[string]*storagev1.VolumeAttachment
	secrets     map[string]*v1.Secret
	attached    []v1.AttachedVolume
}

func (f *fakeAPI) VolumesAttached(context.Context) ([]v1.AttachedVolume, error) {
	return f.attached, nil
}

func (f *fakeAPI) GetCSIDriver(_ context.Context, name string) (*storagev1.CSIDriver, error) {
	if d, ok := f.drivers[name]; ok {
		return d, nil
	}
	return nil, apierrors.NewNotFound(storagev1.Resource("csidrivers"), name)
}

func (f *fakeAPI) GetVolumeAttachment(_ context.Context, name string) (*storagev1.VolumeAttachment, error) {
	if a, ok := f.attachments[name]; ok {
		return a, nil
	}
	return nil, apierrors.NewNotFound(storagev1.Resource("volumeattachments"), name)
}

func (f *fakeAPI) GetSecret(_ context.Context, ns, name string) (*v1.Secret, error) {
	if s, ok := f.secrets[ns+"/"+name]; ok {
		return s, nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("secrets"), name)
}

// registered is a registry with one driver registered.
func registered(t *testing.T, root string, o csitest.Options) (*Registry, *csitest.Driver) {
	t.Helper()
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	r := NewRegistry(RegistryOptions{RootDir: root, Clock: clk})
	if err := os.MkdirAll(r.Dir(), 0o750); err != nil {
		t.Fatal(err)
	}
	o.RegistryDir = r.Dir()
	d := startDriver(t, o)
	testutil.Must(t, r.Register(context.Background(), pluginwatcher.Plugin{Type: registerapi.CSIPlugin, Name: o.Name, Endpoint: d.CSISock,
		Versions: []string{"1.0.0"}, Socket: d.RegSock}))
	if len(r.Drivers()) != 1 {
		t.Fatal("the driver did not register")
	}
	t.Cleanup(r.closeAll)
	return r, d
}

func csiPV(handle string) *v1.PersistentVolume {
	return &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-" + handle}, Spec: v1.PersistentVolumeSpec{
		ClaimRef:    &v1.ObjectReference{Namespace: "ns", Name: "claim", UID: "c1"},
		AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}, MountOptions: []string{"noatime"},
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
			Driver: "hostpath.test", VolumeHandle: handle, FSType: "ext4", VolumeAttributes: map[string]string{"k": "v"},
			NodePublishSecretRef: &v1.SecretReference{Namespace: "ns", Name: "creds"},
		}},
	}}
}

func csiPod(uid types.UID) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-" + string(uid), Namespace: "ns", UID: uid}}
}

type oneClaim struct{ pv *v1.PersistentVolume }

func (o oneClaim) GetPersistentVolumeClaim(_ context.Context, ns, name string) (*v1.PersistentVolumeClaim, error) {
	return &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: "c1"},
		Spec: v1.PersistentVolumeClaimSpec{VolumeName: o.pv.Name}, Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound}}, nil
}

func (o oneClaim) GetPersistentVolume(context.Context, string) (*v1.PersistentVolume, error) {
	return o.pv, nil
}
