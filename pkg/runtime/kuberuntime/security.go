package kuberuntime

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// CFS period the kubelet uses; quota is expressed against it.
const cpuPeriodMicros = 100000

// linuxContainerConfig translates a container's resources and security
// context, pod-level settings filling in what the container leaves unset.
func linuxContainerConfig(pod *v1.Pod, c *v1.Container, memoryCapacity int64, sec Security) (*runtimeapi.LinuxContainerConfig, error) {
	res := linuxResources(pod, c)
	res.OomScoreAdj = oomScoreAdj(pod, c, memoryCapacity)
	lc := &runtimeapi.LinuxContainerConfig{
		Resources: res,
		SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: namespaceOptions(pod),
		},
	}
	sc := lc.SecurityContext
	psc := pod.Spec.SecurityContext
	if psc == nil {
		psc = &v1.PodSecurityContext{}
	}
	csc := c.SecurityContext
	if csc == nil {
		csc = &v1.SecurityContext{}
	}

	if u := firstInt64(csc.RunAsUser, psc.RunAsUser); u != nil {
		sc.RunAsUser = &runtimeapi.Int64Value{Value: *u}
	}
	if g := firstInt64(csc.RunAsGroup, psc.RunAsGroup); g != nil {
		sc.RunAsGroup = &runtimeapi.Int64Value{Value: *g}
	}
	sc.SupplementalGroups = append(sc.SupplementalGroups, psc.SupplementalGroups...)
	if psc.FSGroup != nil {
		sc.SupplementalGroups = append(sc.SupplementalGroups, *psc.FSGroup)
	}
	if csc.Privileged != nil {
		sc.Privileged = *csc.Privileged
	}
	if csc.ReadOnlyRootFilesystem != nil {
		sc.ReadonlyRootfs = *csc.ReadOnlyRootFilesystem
	}
	if csc.AllowPrivilegeEscalation != nil {
		sc.NoNewPrivs = !*csc.AllowPrivilegeEscalation
	}
	if caps := csc.Capabilities; caps != nil {
		sc.Capabilities = &runtimeapi.Capability{}
		for _, c := range caps.Add {
			sc.Capabilities.AddCapabilities = append(sc.Capabilities.AddCapabilities, capName(c))
		}
		for _, c := range caps.Drop {
			sc.Capabilities.DropCapabilities = append(sc.Capabilities.DropCapabilities, capName(c))
		}
	}
	// Always said, as upstream says it: a runtime whose base spec has no
	// masks of its own (containerd's CRI plugin, as configured here)
	// would otherwise leave /proc and /sys open.
	sc.MaskedPaths, sc.ReadonlyPaths = []string{}, []string{}
	if csc.ProcMount == nil || *csc.ProcMount != v1.UnmaskedProcMount {
		sc.MaskedPaths, sc.ReadonlyPaths = defaultMaskedPaths(), slices.Clone(defaultReadonlyPaths)
	}
	var err error
	if sc.Seccomp, err = sec.seccomp(psc, csc); err != nil {
		return nil, err
	}
	if sc.Apparmor, sc.ApparmorProfile, err = appArmor(pod, c); err != nil {
		return nil, err
	}
	sc.SelinuxOptions = seLinux(psc, csc)
	sc.SupplementalGroupsPolicy = supplementalGroupsPolicy(psc)
	return lc, nil
}

func firstInt64(a, b *int64) *int64 {
	if a != nil {
		return a
	}
	return b
}

// capName accepts capabilities with or without the CAP_ prefix and hands
// the runtime the bare name: containerd and CRI-O prepend CAP_ themselves
// (upstream passes the field through, so "CAP_X" silently does nothing).
func capName(c v1.Capability) string {
	return strings.TrimPrefix(strings.ToUpper(string(c)), "CAP_")
}

// linuxResources converts requests and limits to cgroup settings: shares
// from the CPU request, quota from the CPU limit, and the memory limit.
func linuxResources(pod *v1.Pod, c *v1.Container) *runtimeapi.LinuxContainerResources {
	r := &runtimeapi.LinuxContainerResources{}
	cpuReq, hasReq := c.Resources.Requests[v1.ResourceCPU]
	cpuLim, hasLim := limit(pod, c, v1.ResourceCPU)
	switch {
	case hasReq:
		r.CpuShares = milliCPUToShares(cpuReq.MilliValue())
	case hasLim:
		// A limit without a request means the request equals the limit.
		r.CpuShares = milliCPUToShares(cpuLim.MilliValue())
	default:
		r.CpuShares = minShares
	}
	if hasLim {
		r.CpuPeriod = cpuPeriodMicros
		r.CpuQuota = milliCPUToQuota(cpuLim.MilliValue())
	}
	if mem, ok := limit(pod, c, v1.ResourceMemory); ok {
		r.MemoryLimitInBytes = mem.Value()
	}
	return r
}

// limit is a container's limit of a resource; one without takes the
// pod-level limit where the pod sets one, as upstream does.
func limit(pod *v1.Pod, c *v1.Container, name v1.ResourceName) (resource.Quantity, bool) {
	if q, ok := c.Resources.Limits[name]; ok && !q.IsZero() {
		return q, true
	}
	if pod != nil && pod.Spec.Resources != nil {
		if q, ok := pod.Spec.Resources.Limits[name]; ok && !q.IsZero() {
			return q, true
		}
	}
	q, ok := c.Resources.Limits[name]
	return q, ok
}

const (
	minShares     = 2
	sharesPerCPU  = 1024
	milliPerCPU   = 1000
	minQuotaMicro = 1000
)

func milliCPUToShares(milli int64) int64 {
	if milli == 0 {
		return minShares
	}
	s := milli * sharesPerCPU / milliPerCPU
	if s < minShares {
		return minShares
	}
	return s
}

func milliCPUToQuota(milli int64) int64 {
	if milli == 0 {
		return 0
	}
	q := milli * cpuPeriodMicros / milliPerCPU
	if q < minQuotaMicro {
		return minQuotaMicro
	}
	return q
}

// OOM score adjustments by QoS class, as upstream sets them: Guaranteed
// pods are killed last, BestEffort first, Burstable in between by how much
// memory they asked for. The runtime may raise what it cannot grant (this
// VM's containerd restricts adjustments below its own).
const (
	guaranteedOOMScoreAdj = -997
	bestEffortOOMScoreAdj = 1000
)

func oomScoreAdj(pod *v1.Pod, c *v1.Container, memoryCapacity int64) int64 {
	switch podutil.QOSClass(pod) {
	case v1.PodQOSGuaranteed:
		return guaranteedOOMScoreAdj
	case v1.PodQOSBestEffort:
		return bestEffortOOMScoreAdj
	}
	if memoryCapacity <= 0 {
		return bestEffortOOMScoreAdj - 1
	}
	req := c.Resources.Requests[v1.ResourceMemory]
	adj := 1000 - 1000*req.Value()/memoryCapacity
	// Never as protected as Guaranteed, never as exposed as BestEffort.
	if adj < 1000+guaranteedOOMScoreAdj {
		return 1000 + guaranteedOOMScoreAdj
	}
	if adj >= bestEffortOOMScoreAdj {
		return bestEffortOOMScoreAdj - 1
	}
	return adj
}

// verifyRunAsNonRoot refuses to run as root a container that must not:
// by its runAsUser, or by the image's user when it sets none.
func verifyRunAsNonRoot(pod *v1.Pod, c *v1.Container, sc *runtimeapi.LinuxContainerSecurityContext, image *runtimeapi.Image) error {
	nonRoot := false
	if pod.Spec.SecurityContext != nil && pod.Spec.SecurityContext.RunAsNonRoot != nil {
		nonRoot = *pod.Spec.SecurityContext.RunAsNonRoot
	}
	if c.SecurityContext != nil && c.SecurityContext.RunAsNonRoot != nil {
		nonRoot = *c.SecurityContext.RunAsNonRoot
	}
	if !nonRoot {
		return nil
	}
	if sc.RunAsUser != nil {
		if sc.RunAsUser.Value == 0 {
			return fmt.Errorf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", podutil.Ref(pod), c.Name)
		}
		return nil
	}
	switch {
	case image == nil:
		return fmt.Errorf("container has runAsNonRoot and the image's user is unknown (pod: %q, container: %s)", podutil.Ref(pod), c.Name)
	case image.Uid != nil && image.Uid.Value == 0, image.Uid == nil && (image.Username == "" || image.Username == "root"):
		return fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", podutil.Ref(pod), c.Name)
	case image.Uid == nil:
		return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (pod: %q, container: %s)", image.Username, podutil.Ref(pod), c.Name)
	}
	return nil
}
