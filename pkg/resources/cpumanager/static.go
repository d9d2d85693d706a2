package cpumanager

import (
	"fmt"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/resources/numa"
	"github.com/nodelet/nodelet/pkg/resources/topologymanager"
)

// Static policy options, as cpuManagerPolicyOptions names them.
const (
	OptionFullPCPUsOnly        = "full-pcpus-only"
	OptionStrictCPUReservation = "strict-cpu-reservation"
)

// SMTAlignmentError refuses a pod under full-pcpus-only whose request
// is not whole cores, or that whole free cores cannot hold.
type SMTAlignmentError struct {
	Requested, PerCore, AvailablePhysical int
	causedByPhysical                      bool
}

func (e SMTAlignmentError) Error() string {
	if e.causedByPhysical {
		return fmt.Sprintf("SMT Alignment Error: not enough free physical CPUs: available physical CPUs = %d, requested CPUs = %d, CPUs per core = %d", e.AvailablePhysical, e.Requested, e.PerCore)
	}
	return fmt.Sprintf("SMT Alignment Error: requested %d cpus not multiple cpus per core = %d", e.Requested, e.PerCore)
}

// Reason is the reason the pod is refused with.
func (e SMTAlignmentError) Reason() string { return "SMTAlignmentError" }

// static is upstream's static policy: a Guaranteed pod's containers with
// whole CPUs get CPUs of their own, taken from the shared pool, which
// every other container runs on. The reserved CPUs are never given away.
type static struct {
	topo *numa.Topology
	// reserved are kept for the system; reservedCores are the whole cores
	// they touch, which full-pcpus-only never hands out.
	reserved, reservedCores cpuset.CPUSet
	fullPCPUsOnly, strict   bool
	// reuse holds the CPUs of the pod being admitted that its finished
	// init containers leave to its app containers.
	reuse map[string]cpuset.CPUSet
}

func newStatic(topo *numa.Topology, reserved cpuset.CPUSet, numReserved int, options map[string]string) (*static, error) {
	p := &static{topo: topo, reuse: map[string]cpuset.CPUSet{}}
	for name, value := range options {
		b, err := strconv.ParseBool(value)
		switch {
		case name != OptionFullPCPUsOnly && name != OptionStrictCPUReservation:
			return nil, fmt.Errorf("cpuManagerPolicyOptions: option %q is not supported (nodelet honours %s and %s)", name, OptionFullPCPUsOnly, OptionStrictCPUReservation)
		case err != nil:
			return nil, fmt.Errorf("cpuManagerPolicyOptions %s: %q is not a boolean", name, value)
		case name == OptionFullPCPUsOnly:
			p.fullPCPUsOnly = b
		default:
			p.strict = b
		}
	}
	all := topo.CPUs.CPUs()
	if reserved.IsEmpty() {
		if numReserved == 0 {
			return nil, fmt.Errorf("the static CPU manager policy requires CPUs reserved for the system: set reservedSystemCPUs, or a cpu amount in systemReserved or kubeReserved")
		}
		// The lowest-numbered cores, whole, as upstream picks them.
		reserved, _ = takeByTopology(topo, all, numReserved)
	}
	if !reserved.IsSubsetOf(all) || reserved.Size() != max(numReserved, reserved.Size()) {
		return nil, fmt.Errorf("cannot reserve %d CPUs (%s) of the node's %s", numReserved, reserved, all)
	}
	p.reserved = reserved
	for _, cpu := range reserved.List() {
		p.reservedCores = p.reservedCores.Union(topo.CPUs.CPUsInCores(topo.CPUs[cpu].Core))
	}
	return p, nil
}

// shareable is every CPU the shared pool may hold.
func (p *static) shareable() cpuset.CPUSet {
	if p.strict {
		return p.topo.CPUs.CPUs().Difference(p.reserved)
	}
	return p.topo.CPUs.CPUs()
}

// start checks a state read back against this machine and policy, or
// fills a new one.
func (p *static) start(s *state) error {
	all := p.shareable()
	if s.defaultSet.IsEmpty() {
		if len(s.assignments) != 0 {
			return fmt.Errorf("the shared pool is empty while containers hold CPUs")
		}
		s.defaultSet = all
		return nil
	}
	switch {
	case p.strict && !p.reserved.Intersection(s.defaultSet).IsEmpty():
		return fmt.Errorf("some of the strictly reserved CPUs %s are in the shared pool %s", p.reserved.Intersection(s.defaultSet), s.defaultSet)
	case !p.strict && !p.reserved.IsSubsetOf(s.defaultSet):
		return fmt.Errorf("not all reserved CPUs %s are in the shared pool %s", p.reserved, s.defaultSet)
	}
	known := s.defaultSet
	for pod, cs := range s.assignments {
		for c, cpus := range cs {
			if !cpus.Intersection(s.defaultSet).IsEmpty() {
				return fmt.Errorf("pod %s container %s holds %s, which overlaps the shared pool %s", pod, c, cpus, s.defaultSet)
			}
			known = known.Union(cpus)
		}
	}
	if !known.Equals(all) {
		return fmt.Errorf("the node's CPUs %s are not the CPUs in the state, %s", all, known)
	}
	return nil
}

// available are the CPUs that may be given away now.
func (p *static) available(s *state) cpuset.CPUSet { return s.defaultSet.Difference(p.reserved) }

// allocatable are the CPUs that may ever be given away.
func (p *static) allocatable() cpuset.CPUSet { return p.topo.CPUs.CPUs().Difference(p.reserved) }

// guaranteed is how many exclusive CPUs the container gets: its whole
// CPU request in a Guaranteed pod, none otherwise. Pods with pod-level
// resources share the pool, as upstream without PodLevelResourceManagers.
func guaranteed(pod *v1.Pod, c *v1.Container) int {
	if podutil.QOSClass(pod) != v1.PodQOSGuaranteed || pod.Spec.Resources != nil {
		return 0
	}
	q := c.Resources.Requests[v1.ResourceCPU]
	if q.Value()*1000 != q.MilliValue() {
		return 0
	}
	return int(q.Value())
}

func (p *static) allocate(s *state, pod *v1.Pod, c *v1.Container, affinity topologymanager.Hint) error {
	n := guaranteed(pod, c)
	if n == 0 {
		return nil
	}
	uid := string(pod.UID)
	if cpus, ok := s.cpus(uid, c.Name); ok {
		// Admitted before (nodelet restarted): it keeps what it has.
		p.updateReuse(pod, c, cpus)
		return nil
	}
	if err := p.checkSMT(s, n); err != nil {
		return err
	}
	pool := p.available(s).Union(p.reuse[uid])
	var got cpuset.CPUSet
	if affinity.NUMANodes != 0 {
		aligned := pool.Intersection(p.topo.CPUs.CPUsInNUMANodes(affinity.NUMANodes.IDs()...))
		var err error
		if got, err = takeByTopology(p.topo, aligned, min(n, aligned.Size())); err != nil {
			return err
		}
	}
	rest, err := takeByTopology(p.topo, pool.Difference(got), n-got.Size())
	if err != nil {
		return err
	}
	got = got.Union(rest)
	s.defaultSet = s.defaultSet.Difference(got)
	s.set(uid, c.Name, got)
	p.updateReuse(pod, c, got)
	return nil
}

func (p *static) checkSMT(s *state, n int) error {
	if !p.fullPCPUsOnly {
		return nil
	}
	perCore := p.topo.CPUsPerCore()
	if n%perCore != 0 {
		return SMTAlignmentError{Requested: n, PerCore: perCore}
	}
	if free := s.defaultSet.Difference(p.reservedCores).Size(); n > free {
		return SMTAlignmentError{Requested: n, PerCore: perCore, AvailablePhysical: free, causedByPhysical: true}
	}
	return nil
}

// updateReuse: a finished (non-sidecar) init container's CPUs may go to
// the pod's app containers; an app container's are taken.
func (p *static) updateReuse(pod *v1.Pod, c *v1.Container, cpus cpuset.CPUSet) {
	uid := string(pod.UID)
	for k := range p.reuse {
		if k != uid {
			delete(p.reuse, k)
		}
	}
	for i := range pod.Spec.InitContainers {
		ic := &pod.Spec.InitContainers[i]
		if ic.Name != c.Name {
			continue
		}
		if !podutil.IsRestartableInitContainer(ic) {
			p.reuse[uid] = p.reuse[uid].Union(cpus)
			return
		}
		break
	}
	p.reuse[uid] = p.reuse[uid].Difference(cpus)
}

// release gives a container's CPUs back to the shared pool, except those
// another container of the pod holds too (an app container that reused
// an init container's).
func (p *static) release(s *state, pod, container string) {
	cpus, ok := s.cpus(pod, container)
	if !ok {
		return
	}
	s.remove(pod, container)
	for _, other := range s.assignments[pod] {
		cpus = cpus.Difference(other)
	}
	s.defaultSet = s.defaultSet.Union(cpus)
}

// hints lists the NUMA node sets that could hold n CPUs; the narrowest
// are preferred.
func (p *static) hints(available, reusable cpuset.CPUSet, n int) []topologymanager.Hint {
	nodes := p.topo.CPUs.NUMANodes()
	narrowest := nodes.Size()
	// Empty, never nil: nil would say "no preference", and a request
	// that fits nowhere must be refused by the topology policy.
	out := []topologymanager.Hint{}
	topologymanager.IterateMasks(nodes.List(), func(m topologymanager.Mask) {
		ids := m.IDs()
		if p.topo.CPUs.CPUsInNUMANodes(ids...).Size() >= n {
			narrowest = min(narrowest, m.Count())
		}
		for _, c := range reusable.List() {
			if !m.Has(p.topo.CPUs[c].NUMANode) {
				return
			}
		}
		if reusable.Size()+available.Intersection(p.topo.CPUs.CPUsInNUMANodes(ids...)).Size() >= n {
			out = append(out, topologymanager.Hint{NUMANodes: m})
		}
	})
	for i := range out {
		out[i].Preferred = out[i].NUMANodes.Count() == narrowest
	}
	return out
}

func (p *static) containerHints(s *state, pod *v1.Pod, c *v1.Container) map[string][]topologymanager.Hint {
	n := guaranteed(pod, c)
	if n == 0 {
		return nil
	}
	if cpus, ok := s.cpus(string(pod.UID), c.Name); ok {
		if cpus.Size() != n {
			return map[string][]topologymanager.Hint{string(v1.ResourceCPU): {}}
		}
		return map[string][]topologymanager.Hint{string(v1.ResourceCPU): p.hints(cpus, cpuset.New(), n)}
	}
	return map[string][]topologymanager.Hint{string(v1.ResourceCPU): p.hints(p.available(s), p.reuse[string(pod.UID)], n)}
}

// podGuaranteed is the pod's exclusive CPUs at their peak: the larger of
// the app containers and sidecars together, and the largest init
// container beside the sidecars started before it.
func podGuaranteed(pod *v1.Pod) int {
	initPeak, sidecars := 0, 0
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		n := guaranteed(pod, c)
		if podutil.IsRestartableInitContainer(c) {
			sidecars += n
		} else {
			initPeak = max(initPeak, sidecars+n)
		}
	}
	apps := 0
	for i := range pod.Spec.Containers {
		apps += guaranteed(pod, &pod.Spec.Containers[i])
	}
	return max(initPeak, apps+sidecars)
}

func (p *static) podHints(s *state, pod *v1.Pod) map[string][]topologymanager.Hint {
	n := podGuaranteed(pod)
	if n == 0 {
		return nil
	}
	assigned := cpuset.New()
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if cpus, ok := s.cpus(string(pod.UID), cs[i].Name); ok {
				if cpus.Size() != guaranteed(pod, &cs[i]) {
					return map[string][]topologymanager.Hint{string(v1.ResourceCPU): {}}
				}
				assigned = assigned.Union(cpus)
			}
		}
	}
	if assigned.Size() == n {
		return map[string][]topologymanager.Hint{string(v1.ResourceCPU): p.hints(assigned, cpuset.New(), n)}
	}
	reusable := p.reuse[string(pod.UID)].Union(assigned)
	return map[string][]topologymanager.Hint{string(v1.ResourceCPU): p.hints(p.available(s), reusable, n)}
}
