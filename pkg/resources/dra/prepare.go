package dra

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/nodelet/nodelet/pkg/cluster/standalone"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

// Prepare has the drivers prepare the claims of a pod about to get a
// sandbox. A pod whose sandbox runs and whose claims are known is left
// alone (nodelet restarted: its claims were prepared before). Every claim
// is checked before anything is changed, so a pod that cannot run here
// is not tracked and can be deleted.
func (m *Manager) Prepare(ctx context.Context, pod *v1.Pod, sandboxReady bool) error {
	names, err := claimNames(pod)
	if err != nil || len(names) == 0 {
		return err
	}
	if m.known(pod, names, sandboxReady) {
		return nil
	}
	if m.o.Client == nil {
		return fmt.Errorf("resource claims: %w", standalone.ErrNoAPIServer)
	}
	claims := make([]*resourceapi.ResourceClaim, 0, len(names))
	for _, name := range names {
		c, err := m.checkClaim(ctx, pod, name)
		if err != nil {
			return err
		}
		claims = append(claims, c)
	}
	batches, err := m.reference(pod, claims)
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(batches)) {
		if err := m.prepareBatch(ctx, name, batches[name]); err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range claims {
		if info := m.claims[c.Namespace+"/"+c.Name]; info != nil && info.ClaimUID == c.UID {
			info.prepared = true
		}
	}
	return m.saveLocked()
}

// known: every claim is cached with the pod, prepared now or used by a
// running sandbox.
func (m *Manager) known(pod *v1.Pod, names []string, sandboxReady bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range names {
		info := m.claims[pod.Namespace+"/"+n]
		if info == nil || !info.PodUIDs.Has(string(pod.UID)) || (!info.prepared && !sandboxReady) {
			return false
		}
	}
	return true
}

// checkClaim reads a claim and checks the pod may use it here: the
// pod's own claim (for a template), reserved for it, allocated, its
// drivers registered.
func (m *Manager) checkClaim(ctx context.Context, pod *v1.Pod, name string) (*resourceapi.ResourceClaim, error) {
	cctx, cancel := context.WithTimeout(ctx, m.o.Timeout)
	defer cancel()
	c, err := m.o.Client.ResourceV1().ResourceClaims(pod.Namespace).Get(cctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("fetch ResourceClaim %s: %w", name, err)
	}
	for i := range pod.Spec.ResourceClaims {
		n, mustCheckOwner, _ := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if n != nil && *n == name && mustCheckOwner {
			if err := resourceclaim.IsForPod(pod, c, false); err != nil {
				return nil, err
			}
		}
	}
	if !resourceclaim.IsReservedForPod(pod, c, false) {
		return nil, fmt.Errorf("pod %s (%s) is not allowed to use ResourceClaim %s (%s)", pod.Name, pod.UID, name, c.UID)
	}
	if c.Status.Allocation == nil {
		return nil, fmt.Errorf("ResourceClaim %s: not allocated", name)
	}
	for _, r := range c.Status.Allocation.Devices.Results {
		if len(r.SkipNodeOperations) > 0 {
			return nil, fmt.Errorf("ResourceClaim %s: DRAOptionalNodeOperations feature gate is disabled on kubelet", name)
		}
		if _, err := m.driver(r.Driver); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// reference records the pod on each claim (adding new claims, refusing a
// claim of the same name with another UID or being unprepared), writes
// the checkpoint, and returns the claims still to prepare, by driver.
func (m *Manager) reference(pod *v1.Pod, claims []*resourceapi.ResourceClaim) (map[string][]*drapb.Claim, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	batches := map[string][]*drapb.Claim{}
	for _, c := range claims {
		key := c.Namespace + "/" + c.Name
		info := m.claims[key]
		if info == nil {
			info = &claimInfo{ClaimState: ClaimState{ClaimUID: c.UID, ClaimName: c.Name, Namespace: c.Namespace, PodUIDs: sets.New[string](), DriverState: map[string]DriverState{}}}
			for _, r := range c.Status.Allocation.Devices.Results {
				info.DriverState[r.Driver] = DriverState{}
			}
			m.claims[key] = info
		} else if info.ClaimUID != c.UID {
			return nil, fmt.Errorf("old ResourceClaim with same name %s and different UID %s still exists (previous pod force-deleted?!)", c.Name, info.ClaimUID)
		} else if info.unpreparing {
			return nil, fmt.Errorf("ResourceClaim %s is being unprepared", c.Name)
		}
		info.PodUIDs.Insert(string(pod.UID))
		if info.prepared {
			continue
		}
		for name := range info.DriverState {
			batches[name] = append(batches[name], &drapb.Claim{Namespace: c.Namespace, Uid: string(c.UID), Name: c.Name})
		}
	}
	return batches, m.saveLocked()
}

func (m *Manager) prepareBatch(ctx context.Context, name string, claims []*drapb.Claim) error {
	d, err := m.driver(name)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, m.o.Timeout)
	defer cancel()
	resp, err := d.api.NodePrepareResources(cctx, &drapb.NodePrepareResourcesRequest{Claims: claims})
	if err != nil {
		return fmt.Errorf("NodePrepareResources: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range claims {
		result, ok := resp.Claims[c.Uid]
		if !ok {
			return fmt.Errorf("NodePrepareResources skipped ResourceClaim %s", c.Name)
		}
		if result.GetError() != "" {
			return fmt.Errorf("NodePrepareResources failed for ResourceClaim %s: %s", c.Name, result.Error)
		}
		var devices []Device
		for _, dev := range result.GetDevices() {
			devices = append(devices, Device{PoolName: dev.PoolName, DeviceName: dev.DeviceName, ShareID: (*types.UID)(dev.ShareId),
				RequestNames: dev.RequestNames, CDIDeviceIDs: dev.CdiDeviceIds})
		}
		if info := m.claims[c.Namespace+"/"+c.Name]; info != nil {
			info.DriverState[name] = DriverState{Devices: devices}
		}
		klog.InfoS("ResourceClaim prepared", "claim", klog.KRef(c.Namespace, c.Name), "driver", name, "devices", len(devices))
	}
	return nil
}

// Unprepare drops the pod from its claims once its containers stopped;
// a claim no other pod uses is unprepared by its drivers and forgotten.
func (m *Manager) Unprepare(ctx context.Context, pod *v1.Pod) error {
	m.mu.Lock()
	var last []*claimInfo
	changed := false
	for _, info := range m.claims {
		if !info.PodUIDs.Has(string(pod.UID)) {
			continue
		}
		if info.PodUIDs.Len() > 1 {
			info.PodUIDs.Delete(string(pod.UID))
			changed = true
			continue
		}
		last = append(last, info)
	}
	var err error
	if changed {
		err = m.saveLocked()
	}
	m.mu.Unlock()
	if err != nil {
		return err
	}
	return m.unprepare(ctx, last)
}

// unprepare calls each driver for the claims, then forgets them.
func (m *Manager) unprepare(ctx context.Context, infos []*claimInfo) error {
	if len(infos) == 0 {
		// Every pod without claims comes here once it stopped: writing
		// the unchanged state (a file and a directory fsync) cost the
		// disk two syncs per pod in a burst of deletions.
		return nil
	}
	batches := map[string][]*drapb.Claim{}
	for _, info := range infos {
		for name := range info.DriverState {
			batches[name] = append(batches[name], &drapb.Claim{Namespace: info.Namespace, Uid: string(info.ClaimUID), Name: info.ClaimName})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(batches)) {
		d, err := m.driver(name)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, m.o.Timeout)
		resp, err := d.api.NodeUnprepareResources(cctx, &drapb.NodeUnprepareResourcesRequest{Claims: batches[name]})
		cancel()
		if err != nil {
			return fmt.Errorf("NodeUnprepareResources: %w", err)
		}
		for _, c := range batches[name] {
			if r, ok := resp.Claims[c.Uid]; !ok || r.GetError() != "" {
				return fmt.Errorf("NodeUnprepareResources failed for ResourceClaim %s: %s", c.Name, r.GetError())
			}
			klog.InfoS("ResourceClaim unprepared", "claim", klog.KRef(c.Namespace, c.Name), "driver", name)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, info := range infos {
		delete(m.claims, info.Namespace+"/"+info.ClaimName)
	}
	return m.saveLocked()
}

// RetainActive marks the claims no active pod uses any more (pods gone
// while nodelet was down, or whose termination was cut short) for Run
// to unprepare; it runs on the sync loop, so it calls no driver itself.
// A claim so marked takes no new pod until it is unprepared.
func (m *Manager) RetainActive(active []*v1.Pod) {
	keep := podutil.UIDs(active)
	m.mu.Lock()
	defer m.mu.Unlock()
	marked := false
	for _, info := range m.claims {
		for _, uid := range sets.List(info.PodUIDs) {
			if !keep[types.UID(uid)] && info.PodUIDs.Len() > 1 {
				info.PodUIDs.Delete(uid)
			}
		}
		if !info.unpreparing && (info.PodUIDs.Len() == 0 || !keep[types.UID(sets.List(info.PodUIDs)[0])]) {
			info.unpreparing, marked = true, true
		}
	}
	if marked {
		select {
		case m.kick <- struct{}{}:
		default:
		}
	}
}

// unprepareOrphans unprepares the marked claims; what fails (a driver
// not back yet) is tried again at the next tick.
func (m *Manager) unprepareOrphans(ctx context.Context) {
	m.mu.Lock()
	var orphans []*claimInfo
	for _, info := range m.claims {
		if info.unpreparing {
			orphans = append(orphans, info)
		}
	}
	m.mu.Unlock()
	if len(orphans) == 0 {
		return
	}
	if err := m.unprepare(ctx, orphans); err != nil {
		klog.ErrorS(err, "Unpreparing the ResourceClaims of pods no longer active; retrying")
	}
}

// PreCreateContainer gives the container the CDI devices of the claim
// requests it names.
func (m *Manager) PreCreateContainer(_ context.Context, pod *v1.Pod, c *v1.Container, cfg *runtimeapi.ContainerConfig) error {
	ids, err := m.ContainerCDIDevices(pod, c)
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, d := range cfg.CDIDevices {
		have[d.Name] = true
	}
	for _, id := range ids {
		if !have[id] {
			have[id] = true
			cfg.CDIDevices = append(cfg.CDIDevices, &runtimeapi.CDIDevice{Name: id})
		}
	}
	return nil
}

// PreStartContainer has nothing to do for claims.
func (m *Manager) PreStartContainer(context.Context, *v1.Pod, *v1.Container, string) error {
	return nil
}

// ContainerCDIDevices are the CDI device IDs of the claim requests the
// container names (all of a claim's when it names no request).
func (m *Manager) ContainerCDIDevices(pod *v1.Pod, c *v1.Container) ([]string, error) {
	var out []string
	for _, cr := range m.containerClaims(pod, c) {
		m.mu.Lock()
		info := m.claims[pod.Namespace+"/"+cr.claim]
		var ids []string
		if info != nil {
			ids = cdiDevices(info.ClaimState, cr.requests)
		}
		m.mu.Unlock()
		if info == nil {
			return nil, fmt.Errorf("internal error: unable to get claim info for ResourceClaim %s in namespace %s", cr.claim, pod.Namespace)
		}
		out = append(out, ids...)
	}
	return out, nil
}

type containerClaim struct {
	claim    string
	requests []string
}

// containerClaims are the claims (by ResourceClaim name) and requests a
// container uses, sorted.
func (m *Manager) containerClaims(pod *v1.Pod, c *v1.Container) []containerClaim {
	byName := map[string][]string{}
	for _, r := range c.Resources.Claims {
		byName[r.Name] = append(byName[r.Name], r.Request)
	}
	claims := map[string][]string{}
	for i := range pod.Spec.ResourceClaims {
		pc := &pod.Spec.ResourceClaims[i]
		reqs, ok := byName[pc.Name]
		if !ok {
			continue
		}
		if name, _, err := resourceclaim.Name(pod, pc); err == nil && name != nil {
			claims[*name] = append(claims[*name], reqs...)
		}
	}
	if s := pod.Status.ExtendedResourceClaimStatus; s != nil {
		for _, rm := range s.RequestMappings {
			if q, ok := c.Resources.Requests[v1.ResourceName(rm.ResourceName)]; rm.ContainerName == c.Name && ok && !q.IsZero() {
				claims[s.ResourceClaimName] = append(claims[s.ResourceClaimName], rm.RequestName)
			}
		}
	}
	var out []containerClaim
	for _, name := range slices.Sorted(maps.Keys(claims)) {
		out = append(out, containerClaim{claim: name, requests: claims[name]})
	}
	return out
}

func cdiDevices(s ClaimState, requests []string) []string {
	var out []string
	for _, d := range slices.Sorted(maps.Keys(s.DriverState)) {
		for _, dev := range s.DriverState[d].Devices {
			for _, req := range requests {
				if req == "" || len(dev.RequestNames) == 0 || slices.Contains(dev.RequestNames, req) {
					out = append(out, dev.CDIDeviceIDs...)
					break
				}
			}
		}
	}
	return out
}

// ClaimResources is a claim a container uses and its prepared devices,
// for the pod-resources API.
type ClaimResources struct {
	Name, Namespace string
	Requests        []string
	Drivers         map[string][]Device
}

// ContainerClaims are the claims a container uses, with their devices.
func (m *Manager) ContainerClaims(pod *v1.Pod, c *v1.Container) []ClaimResources {
	var out []ClaimResources
	for _, cr := range m.containerClaims(pod, c) {
		m.mu.Lock()
		if info := m.claims[pod.Namespace+"/"+cr.claim]; info != nil {
			r := ClaimResources{Name: cr.claim, Namespace: pod.Namespace, Requests: cr.requests, Drivers: map[string][]Device{}}
			for d, st := range info.DriverState {
				r.Drivers[d] = append([]Device(nil), st.Devices...)
			}
			out = append(out, r)
		}
		m.mu.Unlock()
	}
	return out
}
