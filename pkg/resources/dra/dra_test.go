package dra

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/kubeclienttest"
	"github.com/nodelet/nodelet/internal/testutil"
	"github.com/nodelet/nodelet/pkg/resources/pluginwatcher"
)

const drv = "test-driver.cdi.k8s.io"

// fakeDriver is a DRA kubelet plugin on real sockets: its registration
// socket answers GetInfo, its DRA socket prepares and unprepares.
type fakeDriver struct {
	drapb.UnimplementedDRAPluginServer
	registerapi.UnimplementedRegistrationServer
	name, dir string
	versions  []string
	srv, reg  *grpc.Server

	mu    sync.Mutex
	calls []string
	fail  string
}

func startDriver(t *testing.T, regDir, dir string, versions ...string) *fakeDriver {
	t.Helper()
	d := &fakeDriver{name: drv, dir: dir, versions: versions, srv: grpc.NewServer(), reg: grpc.NewServer()}
	drapb.RegisterDRAPluginServer(d.srv, d)
	registerapi.RegisterRegistrationServer(d.reg, d)
	ln, err := net.Listen("unix", filepath.Join(dir, "dra.sock"))
	testutil.Must(t, err)
	go d.srv.Serve(ln)
	rl, err := net.Listen("unix", filepath.Join(regDir, drv+"-reg.sock"))
	testutil.Must(t, err)
	go d.reg.Serve(rl)
	t.Cleanup(func() { d.srv.Stop(); d.reg.Stop() })
	return d
}

func (d *fakeDriver) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: d.name, Endpoint: filepath.Join(d.dir, "dra.sock"), SupportedVersions: d.versions}, nil
}

func (d *fakeDriver) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	d.record("registered=%v %s", s.PluginRegistered, s.Error)
	return &registerapi.RegistrationStatusResponse{}, nil
}

func (d *fakeDriver) record(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, fmt.Sprintf(format, args...))
}

func (d *fakeDriver) recorded() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return strings.Join(d.calls, "|")
}

func (d *fakeDriver) NodePrepareResources(_ context.Context, r *drapb.NodePrepareResourcesRequest) (*drapb.NodePrepareResourcesResponse, error) {
	resp := &drapb.NodePrepareResourcesResponse{Claims: map[string]*drapb.NodePrepareResourceResponse{}}
	for _, c := range r.Claims {
		d.record("prepare %s/%s", c.Namespace, c.Name)
		resp.Claims[c.Uid] = &drapb.NodePrepareResourceResponse{Error: d.fail, Devices: []*drapb.Device{
			{RequestNames: []string{"gpu"}, PoolName: "n1", DeviceName: "device-00", CdiDeviceIds: []string{drv + "/test=claim-" + c.Uid + "-gpu"}},
			{RequestNames: []string{"nic"}, PoolName: "n1", DeviceName: "device-01", CdiDeviceIds: []string{drv + "/test=claim-" + c.Uid + "-nic"}},
		}}
	}
	return resp, nil
}

func (d *fakeDriver) NodeUnprepareResources(_ context.Context, r *drapb.NodeUnprepareResourcesRequest) (*drapb.NodeUnprepareResourcesResponse, error) {
	resp := &drapb.NodeUnprepareResourcesResponse{Claims: map[string]*drapb.NodeUnprepareResourceResponse{}}
	for _, c := range r.Claims {
		d.record("unprepare %s/%s", c.Namespace, c.Name)
		resp.Claims[c.Uid] = &drapb.NodeUnprepareResourceResponse{}
	}
	return resp, nil
}

// pod uses a claim made from a template, named in its status.
func pod(uid string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-" + uid, Namespace: "ns", UID: types.UID(uid)}}
	tmpl := "gpu-template"
	p.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: &tmpl}}
	claim := "p-" + uid + "-gpu"
	p.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: &claim}}
	p.Spec.Containers = []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu", Request: "gpu"}}}}}
	return p
}

func claimFor(p *v1.Pod, reserved bool) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: p.Name + "-gpu", Namespace: "ns", UID: types.UID("claim-" + string(p.UID)),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID, Controller: new(true)}}}}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: drv, Pool: "n1", Device: "device-00"}, {Request: "nic", Driver: drv, Pool: "n1", Device: "device-01"}}}}
	if reserved {
		c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: p.Name, UID: p.UID}}
	}
	return c
}

type fixture struct {
	m      *Manager
	client *fake.Clientset
	clock  *testingclock.FakeClock
	root   string
	stop   func()
}

func newFixture(t *testing.T, root string, objects ...*resourceapi.ResourceClaim) *fixture {
	t.Helper()
	f := &fixture{client: fake.NewSimpleClientset(), clock: testingclock.NewFakeClock(time.Now()), root: root}
	for _, c := range objects {
		_, err := f.client.ResourceV1().ResourceClaims(c.Namespace).Create(context.Background(), c, metav1.CreateOptions{})
		testutil.Must(t, err)
	}
	m, err := New(Options{RootDir: root, NodeName: "n1", Client: kubeclienttest.Wrap(f.client), Clock: f.clock})
	testutil.Must(t, err)
	f.m = m
	w := pluginwatcher.New(pluginwatcher.Options{RootDir: root, Clock: f.clock, Handlers: map[string]pluginwatcher.Handler{registerapi.DRAPlugin: m}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { w.Run(ctx); done <- struct{}{} }()
	go func() { m.Run(ctx); done <- struct{}{} }()
	var once sync.Once
	f.stop = func() { once.Do(func() { cancel(); <-done; <-done }) }
	t.Cleanup(f.stop)
	return f
}

func (f *fixture) register(t *testing.T, versions ...string) *fakeDriver {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "dra")
	testutil.Must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	testutil.Must(t, os.MkdirAll(pluginwatcher.Dir(f.root), 0o750))
	d := startDriver(t, pluginwatcher.Dir(f.root), dir, versions...)
	testutil.WaitFor(t, "the driver told of its registration", func() bool { f.clock.Step(time.Second); return d.recorded() != "" })
	return d
}

func shortRoot(t *testing.T) string {
	dir, err := os.MkdirTemp("/tmp", "dra")
	testutil.Must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestPrepareCreateUnprepare: a pod's claim is prepared before its
// sandbox, its container gets the CDI device of the request it names,
// and the claim is unprepared once the pod stopped.
func TestPrepareCreateUnprepare(t *testing.T) {
	p := pod("a")
	f := newFixture(t, shortRoot(t), claimFor(p, true))
	d := f.register(t, "v1.DRAPlugin", "v1beta1.DRAPlugin")
	testutil.Must(t, f.m.Prepare(context.Background(), p, false))
	cfg := &runtimeapi.ContainerConfig{}
	testutil.Must(t, f.m.PreCreateContainer(context.Background(), p, &p.Spec.Containers[0], cfg))
	if len(cfg.CDIDevices) != 1 || cfg.CDIDevices[0].Name != drv+"/test=claim-claim-a-gpu" {
		t.Fatalf("CDI devices %v", cfg.CDIDevices)
	}
	// Prepared claims are not prepared again at the next sync.
	testutil.Must(t, f.m.Prepare(context.Background(), p, false))
	if r := f.m.ContainerClaims(p, &p.Spec.Containers[0]); len(r) != 1 || r[0].Name != "p-a-gpu" || len(r[0].Drivers[drv]) != 2 {
		t.Fatalf("claim resources %+v", r)
	}
	testutil.Must(t, f.m.Unprepare(context.Background(), p))
	if got := d.recorded(); got != "registered=true |prepare ns/p-a-gpu|unprepare ns/p-a-gpu" {
		t.Fatalf("driver calls %s", got)
	}
	claims, err := loadState(filepath.Join(f.root, StateFile))
	if err != nil || len(claims) != 0 {
		t.Fatalf("checkpoint after unprepare: %v %v", claims, err)
	}
}

// TestUnprepareWithoutClaimsWritesNothing: a pod without claims, stopped,
// leaves the state file alone (it was rewritten and synced for every pod),
// while one with a claim removes it from the file.
func TestUnprepareWithoutClaimsWritesNothing(t *testing.T) {
	p := pod("a")
	f := newFixture(t, shortRoot(t), claimFor(p, true))
	f.register(t, "v1.DRAPlugin")
	plain := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "ns", UID: "plain"}}
	testutil.Must(t, f.m.Prepare(context.Background(), p, false))
	state := filepath.Join(f.root, StateFile)
	testutil.Must(t, os.Remove(state))
	testutil.Must(t, f.m.Unprepare(context.Background(), plain))
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Fatalf("a pod without claims wrote the state: %v", err)
	}
	testutil.Must(t, f.m.Unprepare(context.Background(), p))
	if claims, err := loadState(state); err != nil || len(claims) != 0 {
		t.Fatalf("after the claim's pod stopped: %v %v", claims, err)
	}
}

// TestPrepareRefusals: nothing is tracked or prepared for a claim the
// pod may not use here.
func TestPrepareRefusals(t *testing.T) {
	unreserved, noDriver := pod("u"), pod("n")
	f := newFixture(t, shortRoot(t), claimFor(unreserved, false), claimFor(noDriver, true))
	if err := f.m.Prepare(context.Background(), noDriver, false); err == nil || err.Error() != "DRA driver test-driver.cdi.k8s.io is not registered" {
		t.Fatalf("no driver: %v", err)
	}
	d := f.register(t, "v1.DRAPlugin")
	if err := f.m.Prepare(context.Background(), unreserved, false); err == nil || !strings.Contains(err.Error(), "is not allowed to use ResourceClaim p-u-gpu") {
		t.Fatalf("not reserved: %v", err)
	}
	if strings.Contains(d.recorded(), "prepare") {
		t.Fatalf("prepared a refused claim: %s", d.recorded())
	}
	if claims, _ := loadState(filepath.Join(f.root, StateFile)); len(claims) != 0 {
		t.Fatalf("refused claims tracked: %v", claims)
	}
	d.fail = "no such device"
	if err := f.m.Prepare(context.Background(), noDriver, false); err == nil || !strings.Contains(err.Error(), "NodePrepareResources failed for ResourceClaim p-n-gpu: no such device") {
		t.Fatalf("driver error: %v", err)
	}
}

// TestUnsupportedDriverRefused: a driver speaking no DRA service nodelet
// knows is told why.
func TestUnsupportedDriverRefused(t *testing.T) {
	f := newFixture(t, shortRoot(t))
	d := f.register(t, "v1alpha4.Node")
	if got := d.recorded(); !strings.HasPrefix(got, "registered=false invalid supported gRPC versions of DRA driver plugin") {
		t.Fatalf("told %q", got)
	}
}

// TestRestartKeepsClaims: after a restart the checkpoint gives a
// running pod's containers their devices without the API server, and a
// claim whose pod is gone is unprepared once its driver is back.
func TestRestartKeepsClaims(t *testing.T) {
	root := shortRoot(t)
	stays, goes := pod("s"), pod("g")
	f := newFixture(t, root, claimFor(stays, true), claimFor(goes, true))
	first := f.register(t, "v1.DRAPlugin")
	testutil.Must(t, f.m.Prepare(context.Background(), stays, false))
	testutil.Must(t, f.m.Prepare(context.Background(), goes, false))
	// nodelet and the driver stop; the driver's sockets go with it.
	f.stop()
	first.srv.Stop()
	first.reg.Stop()

	g, err := New(Options{RootDir: root, NodeName: "n1", Clock: f.clock})
	testutil.Must(t, err)
	// No API client, no driver: the running pod needs neither.
	testutil.Must(t, g.Prepare(context.Background(), stays, true))
	cfg := &runtimeapi.ContainerConfig{}
	testutil.Must(t, g.PreCreateContainer(context.Background(), stays, &stays.Spec.Containers[0], cfg))
	if len(cfg.CDIDevices) != 1 {
		t.Fatalf("CDI devices after a restart: %v", cfg.CDIDevices)
	}
	g.RetainActive([]*v1.Pod{stays})
	g.unprepareOrphans(context.Background())
	if len(g.snapshotLocked()) != 2 {
		t.Fatal("a claim was forgotten before its driver could unprepare it")
	}

	f2 := &fixture{m: g, clock: f.clock, root: root}
	w := pluginwatcher.New(pluginwatcher.Options{RootDir: root, Clock: f.clock, Handlers: map[string]pluginwatcher.Handler{registerapi.DRAPlugin: g}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	d := f2.register(t, "v1.DRAPlugin")
	// Marked for unpreparing, the claim takes no new pod meanwhile.
	g.o.Client = kubeclienttest.Wrap(f.client)
	if err := g.Prepare(context.Background(), goes, false); err == nil || !strings.Contains(err.Error(), "is being unprepared") {
		t.Fatalf("a claim being unprepared: %v", err)
	}
	g.unprepareOrphans(context.Background())
	if got := d.recorded(); got != "registered=true |unprepare ns/p-g-gpu" {
		t.Fatalf("driver calls %s", got)
	}
	if s := g.snapshotLocked(); len(s) != 1 || s[0].ClaimName != "p-s-gpu" {
		t.Fatalf("claims %+v", s)
	}
}

// TestSlicesWiped: the node's slices go at start, and a driver's when it
// went and did not come back within the delay.
func TestSlicesWiped(t *testing.T) {
	f := newFixture(t, shortRoot(t))
	deletes := func() []string {
		var out []string
		for _, a := range f.client.Actions() {
			if dc, ok := a.(k8stesting.DeleteCollectionAction); ok && dc.GetResource().Resource == "resourceslices" {
				out = append(out, dc.GetListRestrictions().Fields.String())
			}
		}
		return out
	}
	testutil.WaitFor(t, "the node's slices deleted at start", func() bool { return len(deletes()) == 1 })
	if d := deletes(); d[0] != "spec.nodeName=n1" {
		t.Fatalf("deleted %v", d)
	}
	d := f.register(t, "v1.DRAPlugin")
	// The driver goes: stopping its server removes its socket.
	d.reg.Stop()
	testutil.WaitFor(t, "the driver's slices deleted after the delay", func() bool { f.clock.Step(5 * time.Second); return len(deletes()) == 2 })
	if d := deletes(); d[1] != "spec.driver="+drv+",spec.nodeName=n1" {
		t.Fatalf("deleted %v", d)
	}
}

// TestUpstreamCheckpoint: the kubelet's file reads, and nodelet writes
// the same bytes for it.
func TestUpstreamCheckpoint(t *testing.T) {
	want, err := os.ReadFile(filepath.Join("testdata", "upstream_dra_manager_state"))
	testutil.Must(t, err)
	claims, err := decodeState(want)
	testutil.Must(t, err)
	if len(claims) != 1 || claims[0].DriverState[drv].Devices[0].CDIDeviceIDs[0] != drv+"/test=claim-claim-uid-gpu" || !claims[0].PodUIDs.Has("pod-a") {
		t.Fatalf("read %+v", claims)
	}
	got, err := encodeState(claims)
	testutil.Must(t, err)
	if string(got) != strings.TrimSpace(string(want)) {
		t.Fatalf("nodelet writes\n%s\nthe kubelet\n%s", got, want)
	}
}
