// Package dra is the node side of Dynamic Resource Allocation (v1), as
// the upstream kubelet's DRA manager: DRA drivers register through the
// plugin watcher (type DRAPlugin, gRPC service v1.DRAPlugin or
// v1beta1.DRAPlugin); before a pod's sandbox is made, each ResourceClaim
// it uses (allocated by the scheduler, reserved for the pod) is prepared
// by its drivers (NodePrepareResources), whose CDI device IDs go to the
// containers that name the claim; once the pod's containers have all
// stopped, claims no other pod uses are unprepared
// (NodeUnprepareResources).
//
// A claim's life on the node:
//
//	  Prepare (validated: allocated, reserved for the pod, drivers here)
//	(none) ──────────────► referenced ──NodePrepareResources──► prepared
//	                            ▲   pod added / removed               │ last pod gone
//	                            └──────────────────────────────────────┤
//	                                                                    ▼
//	                                          NodeUnprepareResources ──► (none)
//
// testdata/claim_lifecycle.txt is the golden trace of a shared claim's
// life, across a restart.
//
// The claims, their pods and devices are kept in <root>/dra_manager_state
// (upstream's format): a restarted nodelet, or the kubelet after it,
// gives restarted containers their devices and unprepares what is left.
// When a driver goes, its ResourceSlices for this node are deleted after
// a grace period unless it comes back; at start, the node's slices are
// deleted, as upstream does, until the drivers register again.
package dra

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/cluster/kubeclient"
	"github.com/nodelet/nodelet/pkg/resources/pluginwatcher"
)

// Options configure a Manager.
type Options struct {
	RootDir  string
	NodeName string
	// Client reads ResourceClaims and deletes the node's ResourceSlices.
	Client kubeclient.Interface
	Clock  clock.WithTicker
	// WipeDelay is how long a driver that went may take to come back
	// before its ResourceSlices are deleted (upstream: 30 s).
	WipeDelay time.Duration
	// Timeout bounds each call to a driver.
	Timeout time.Duration
}

// driver is a registered DRA driver.
type driver struct {
	name, socket string
	conn         *grpc.ClientConn
	api          drapbv1.DRAPluginClient
}

// claimInfo is a claim in the cache.
type claimInfo struct {
	ClaimState
	// prepared: NodePrepareResources succeeded since nodelet started
	// (claims read back from the checkpoint are prepared again before a
	// new sandbox uses them; the call is idempotent).
	prepared bool
	// unpreparing: no active pod uses it; Run unprepares it.
	unpreparing bool
}

// Manager is the DRA manager.
type Manager struct {
	o    Options
	path string

	mu      sync.Mutex
	drivers map[string]*driver
	claims  map[string]*claimInfo // by namespace/name
	// wipes are drivers that went, with when their slices go.
	wipes map[string]time.Time
	// kick wakes Run for claims to unprepare.
	kick chan struct{}
}

// New reads the checkpoint.
func New(o Options) (*Manager, error) {
	if o.WipeDelay == 0 {
		o.WipeDelay = 30 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 45 * time.Second
	}
	m := &Manager{o: o, path: filepath.Join(o.RootDir, StateFile), drivers: map[string]*driver{}, claims: map[string]*claimInfo{}, wipes: map[string]time.Time{},
		kick: make(chan struct{}, 1)}
	restored, err := loadState(m.path)
	if err != nil {
		return nil, err
	}
	for _, c := range restored {
		if c.PodUIDs == nil {
			c.PodUIDs = sets.New[string]()
		}
		m.claims[c.Namespace+"/"+c.ClaimName] = &claimInfo{ClaimState: c}
	}
	return m, nil
}

// Services nodelet speaks, newest first.
var services = []string{drapbv1.DRAPluginService, drapbv1beta1.DRAPluginService}

// Register implements pluginwatcher.Handler.
func (m *Manager) Register(ctx context.Context, p pluginwatcher.Plugin) error {
	service := ""
	for _, s := range services {
		if slices.Contains(p.Versions, s) {
			service = s
			break
		}
	}
	if service == "" {
		return fmt.Errorf("invalid supported gRPC versions of DRA driver plugin %s at endpoint %s: none of services supported by the plugin (%q) are supported by the kubelet (%q)",
			p.Name, p.Endpoint, p.Versions, services)
	}
	conn, err := grpc.NewClient("unix://"+p.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("localhost"))
	if err != nil {
		return fmt.Errorf("DRA driver %s: %w", p.Name, err)
	}
	d := &driver{name: p.Name, socket: p.Socket, conn: conn, api: drapbv1.NewDRAPluginClient(conn)}
	if service == drapbv1beta1.DRAPluginService {
		d.api = drapbv1beta1.V1Beta1ClientWrapper{DRAPluginClient: drapbv1beta1.NewDRAPluginClient(conn)}
	}
	m.mu.Lock()
	old := m.drivers[p.Name]
	m.drivers[p.Name] = d
	delete(m.wipes, p.Name)
	m.mu.Unlock()
	if old != nil {
		old.conn.Close()
	}
	klog.InfoS("DRA driver registered", "driver", p.Name, "endpoint", p.Endpoint, "service", service)
	return nil
}

// Deregister implements pluginwatcher.Handler: the driver is forgotten
// and, unless it comes back, its slices deleted after the delay.
func (m *Manager) Deregister(_ context.Context, p pluginwatcher.Plugin) {
	m.mu.Lock()
	d, ok := m.drivers[p.Name]
	if ok && d.socket == p.Socket {
		delete(m.drivers, p.Name)
		m.wipes[p.Name] = m.o.Clock.Now().Add(m.o.WipeDelay)
	}
	m.mu.Unlock()
	if ok && d.socket == p.Socket {
		d.conn.Close()
		klog.InfoS("DRA driver deregistered", "driver", p.Name, "slicesDeletedIn", m.o.WipeDelay)
	}
}

// Run deletes the node's ResourceSlices at start (no driver has
// registered yet), then those of drivers that went and did not come
// back, and unprepares the claims no active pod uses, until ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	pending := map[string]bool{"": true} // "" is every driver
	t := m.o.Clock.NewTicker(time.Second)
	defer t.Stop()
	defer m.closeAll()
	for {
		m.mu.Lock()
		now := m.o.Clock.Now()
		for name, at := range m.wipes {
			if !now.Before(at) {
				pending[name] = true
				delete(m.wipes, name)
			}
		}
		m.mu.Unlock()
		for name := range pending {
			if err := m.wipe(ctx, name); err != nil {
				klog.ErrorS(err, "Deleting ResourceSlices failed; retrying", "driver", name)
				continue
			}
			delete(pending, name)
		}
		m.unprepareOrphans(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		case <-m.kick:
		}
	}
}

// wipe deletes the node's ResourceSlices of a driver ("" for all).
func (m *Manager) wipe(ctx context.Context, name string) error {
	if m.o.Client == nil {
		return nil
	}
	sel := fields.Set{resourceapi.ResourceSliceSelectorNodeName: m.o.NodeName}
	if name != "" {
		sel[resourceapi.ResourceSliceSelectorDriver] = name
	}
	cctx, cancel := context.WithTimeout(ctx, m.o.Timeout)
	defer cancel()
	err := m.o.Client.ResourceV1().ResourceSlices().DeleteCollection(cctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: sel.String()})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	klog.V(3).InfoS("Deleted ResourceSlices", "fieldSelector", sel.String())
	return nil
}

func (m *Manager) closeAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range m.drivers {
		d.conn.Close()
	}
}

// claimNames are the names of the claims the pod uses (templates'
// claims as the pod's status names them).
func claimNames(pod *v1.Pod) ([]string, error) {
	var out []string
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil {
			return nil, err
		}
		if name != nil {
			out = append(out, *name)
		}
	}
	if s := pod.Status.ExtendedResourceClaimStatus; s != nil {
		out = append(out, s.ResourceClaimName)
	}
	return out, nil
}

// snapshot is the cache as the checkpoint holds it.
func (m *Manager) snapshotLocked() []ClaimState {
	keys := make([]string, 0, len(m.claims))
	for k := range m.claims {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]ClaimState, 0, len(keys))
	for _, k := range keys {
		out = append(out, m.claims[k].ClaimState)
	}
	return out
}

func (m *Manager) saveLocked() error { return saveState(m.path, m.snapshotLocked()) }

func (m *Manager) driver(name string) (*driver, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.drivers[name]
	if !ok {
		return nil, fmt.Errorf("DRA driver %s is not registered", name)
	}
	return d, nil
}
