// Package topologymanager admits pods whose resources can be placed as
// topologyManagerPolicy asks, and has the resource managers allocate
// them there, as the upstream kubelet's topology manager does.
//
// For each container (scope container) or once for the pod (scope pod),
// every hint provider (the CPU, memory and device managers) says on which
// sets of NUMA nodes it could place what is asked, and which of those it
// prefers. The policy merges the hints into one placement:
//
//	none              no merge: every provider allocates without a placement
//	best-effort       the best merge, admitted whatever it is
//	restricted        the best merge, admitted only if every provider prefers it
//	single-numa-node  the best merge of single-node hints, admitted only if preferred
//
// A pod that cannot be placed is refused with TopologyAffinityError.
// Otherwise each provider allocates in turn, init containers first, with
// the placement as its affinity; a provider's failure refuses the pod
// with the provider's reason (SMTAlignmentError, say) or
// UnexpectedAdmissionError.
package topologymanager

import (
	"errors"
	"fmt"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/pods/admission"
	"github.com/nodelet/nodelet/pkg/resources/numa"
)

// Scopes, as topologyManagerScope names them.
const (
	ScopeContainer = "container"
	ScopePod       = "pod"
)

// Policy options, as topologyManagerPolicyOptions names them.
const (
	OptionPreferClosestNUMANodes = "prefer-closest-numa-nodes"
	OptionMaxAllowableNUMANodes  = "max-allowable-numa-nodes"
	// defaultMaxNUMANodes: hints are merged over every combination of
	// nodes, which grows as 2^n.
	defaultMaxNUMANodes = 8
)

// Reasons a pod is refused with.
const (
	ReasonTopologyAffinity = "TopologyAffinityError"
	ReasonUnexpected       = "UnexpectedAdmissionError"
)

// HintProvider is a resource manager as the topology manager asks it.
type HintProvider interface {
	// TopologyHints returns, per resource, where the container's request
	// could be placed; nil means no preference.
	TopologyHints(pod *v1.Pod, c *v1.Container) map[string][]Hint
	// PodTopologyHints is TopologyHints for the whole pod.
	PodTopologyHints(pod *v1.Pod) map[string][]Hint
	// Allocate assigns the container what it asks, within affinity
	// (no preference when zero) if it can.
	Allocate(pod *v1.Pod, c *v1.Container, affinity Hint) error
}

// AdmissionError is an allocation failure with a reason of its own
// (upstream's Type()), the reason the pod is refused with.
type AdmissionError interface {
	error
	Reason() string
}

// Options configure a Manager.
type Options struct {
	Policy, Scope string
	PolicyOptions map[string]string
	Topology      *numa.Topology
	// Providers are asked in order; the CPU manager first, as upstream.
	Providers []HintProvider
}

// Manager is the topology manager.
type Manager struct {
	policy    *policy
	scope     string
	providers []HintProvider
}

// New checks the configuration and builds the manager.
func New(o Options) (*Manager, error) {
	m := &Manager{policy: &policy{name: o.Policy, nodes: o.Topology.NodeIDs()}, scope: o.Scope, providers: o.Providers}
	if o.Policy == PolicyNone {
		return m, nil
	}
	switch o.Policy {
	case PolicyBestEffort, PolicyRestricted, PolicySingleNUMANode:
	default:
		return nil, fmt.Errorf("topologyManagerPolicy %q is not one of none, best-effort, restricted, single-numa-node", o.Policy)
	}
	if o.Scope != ScopeContainer && o.Scope != ScopePod {
		return nil, fmt.Errorf("topologyManagerScope %q is not one of container, pod", o.Scope)
	}
	limit, err := m.applyOptions(o)
	if err != nil {
		return nil, err
	}
	if n := len(m.policy.nodes); n > limit {
		return nil, fmt.Errorf("topologyManagerPolicy %s is unsupported on machines with more than %d NUMA nodes (this one has %d; max-allowable-numa-nodes raises the limit)", o.Policy, limit, n)
	}
	return m, nil
}

func (m *Manager) applyOptions(o Options) (int, error) {
	limit := defaultMaxNUMANodes
	for name, value := range o.PolicyOptions {
		switch name {
		case OptionPreferClosestNUMANodes:
			b, err := strconv.ParseBool(value)
			if err != nil {
				return 0, fmt.Errorf("topologyManagerPolicyOptions %s: %q is not a boolean", name, value)
			}
			m.policy.preferClosest = b
		case OptionMaxAllowableNUMANodes:
			n, err := strconv.Atoi(value)
			if err != nil || n < defaultMaxNUMANodes {
				return 0, fmt.Errorf("topologyManagerPolicyOptions %s: %q must be a number no less than %d", name, value, defaultMaxNUMANodes)
			}
			limit = n
		default:
			return 0, fmt.Errorf("topologyManagerPolicyOptions: unknown option %q", name)
		}
	}
	if m.policy.preferClosest {
		m.policy.distances = map[int][]uint64{}
		for _, n := range o.Topology.Nodes {
			if n.Distances == nil {
				return 0, fmt.Errorf("topologyManagerPolicyOptions %s: NUMA node %d has no distances in sysfs", OptionPreferClosestNUMANodes, n.ID)
			}
			m.policy.distances[n.ID] = n.Distances
		}
	}
	return limit, nil
}

// Admit places a new pod's containers, and has every provider allocate
// them, init containers first. It returns upstream's reason and message
// when the pod cannot run here.
func (m *Manager) Admit(a admission.Attributes) admission.Verdict {
	pod := a.Pod
	containers := append(append([]v1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...)
	podHint := Hint{}
	if m.policy.name != PolicyNone && m.scope == ScopePod {
		var admit bool
		if podHint, admit = m.policy.merge(m.podHints(pod)); !admit {
			return refuse(pod, "", podHint)
		}
	}
	for i := range containers {
		c := &containers[i]
		hint := podHint
		if m.policy.name != PolicyNone && m.scope == ScopeContainer {
			var admit bool
			if hint, admit = m.policy.merge(m.containerHints(pod, c)); !admit {
				return refuse(pod, c.Name, hint)
			}
		}
		klog.V(3).InfoS("Topology affinity", "pod", klog.KObj(pod), "podUID", pod.UID, "container", c.Name, "hint", hint)
		for _, p := range m.providers {
			if err := p.Allocate(pod, c, hint); err != nil {
				return admission.Reject(admissionError(err))
			}
		}
	}
	return admission.Verdict{}
}

func refuse(pod *v1.Pod, container string, hint Hint) admission.Verdict {
	klog.InfoS("No placement satisfies the topology manager policy", "pod", klog.KObj(pod), "podUID", pod.UID, "container", container, "bestHint", hint)
	return admission.Reject(ReasonTopologyAffinity, "Resources cannot be allocated with Topology locality")
}

// admissionError is upstream's reason and message for a failed
// allocation.
func admissionError(err error) (string, string) {
	var ae AdmissionError
	if errors.As(err, &ae) {
		return ae.Reason(), ae.Error()
	}
	return ReasonUnexpected, fmt.Sprintf("Allocate failed due to %v, which is unexpected", err)
}

func (m *Manager) containerHints(pod *v1.Pod, c *v1.Container) []map[string][]Hint {
	out := make([]map[string][]Hint, len(m.providers))
	for i, p := range m.providers {
		out[i] = p.TopologyHints(pod, c)
	}
	return out
}

func (m *Manager) podHints(pod *v1.Pod) []map[string][]Hint {
	out := make([]map[string][]Hint, len(m.providers))
	for i, p := range m.providers {
		out[i] = p.PodTopologyHints(pod)
	}
	return out
}
