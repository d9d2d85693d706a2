// Package admission decides whether a pod may run on the node, and
// whether a running pod may be resized: every admission question has its
// place here, and one shape of answer, a Verdict.
//
// An Admitter asks its Handlers in order, the first refusal wins. The
// composition root builds that list, so the order of the checks is read
// in one place. Handlers that belong to another concern (the node
// shutting down, the topology manager placing a pod, the runtime's
// features) implement Handler in their own package; the node's own
// checks (fields, pressure, sysctls, OS, node name, affinity, taints,
// host ports, resources, AppArmor) are here.
//
// A Resizer decides in-place resizes with the same resource arithmetic
// (see resize.go).
package admission

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// Verdict answers an admission question: the zero Verdict admits; a
// refusal carries upstream's reason (OutOfcpu, NodeShutdown, ...) and a
// message.
type Verdict struct {
	Reason, Message string
}

// Reject refuses with reason and message.
func Reject(reason, message string) Verdict { return Verdict{Reason: reason, Message: message} }

// Admitted reports whether the verdict lets the pod run.
func (v Verdict) Admitted() bool { return v.Reason == "" }

// Attributes are what a handler judges: the pod, the pods already
// admitted and still active, and the node as it is now.
type Attributes struct {
	Pod    *v1.Pod
	Active []*v1.Pod
	Node   *v1.Node
}

// Handler answers whether a new pod may run.
type Handler interface {
	Admit(Attributes) Verdict
}

// HandlerFunc is a Handler written as a function.
type HandlerFunc func(Attributes) Verdict

// Admit calls f.
func (f HandlerFunc) Admit(a Attributes) Verdict { return f(a) }

// Decisions remember each pod's admission decision, so a pod is admitted
// or rejected once in its life, not again after every restart with the
// node's state of the moment. Their methods must not block.
type Decisions interface {
	Decision(uid types.UID) (admitted bool, reason, message string, ok bool)
	Decide(pod *v1.Pod, admitted bool, reason, message string)
}

// Options build an Admitter.
type Options struct {
	// Node is the node pods are admitted against: its labels, taints and
	// allocatable resources (including the pod count).
	Node func() *v1.Node
	// Handlers are asked in order; the first refusal is the pod's.
	Handlers []Handler
	// Decisions remember decisions across restarts; nil remembers none.
	Decisions Decisions
}

// Admitter admits new pods.
type Admitter struct {
	o Options
}

// New builds an Admitter.
func New(o Options) *Admitter {
	if o.Decisions == nil {
		o.Decisions = noDecisions{}
	}
	return &Admitter{o: o}
}

// Admit decides whether pod may run beside the active pods. A pod
// restored from the journal (its source silent since a restart) keeps the
// decision it had: it is neither re-admitted nor re-rejected on the
// journal's word. A pod its source delivers is decided against the node
// as it is now, as upstream: a node restarted smaller honours its new
// size.
func (a *Admitter) Admit(active []*v1.Pod, pod *v1.Pod, restored bool) Verdict {
	if admitted, reason, message, ok := a.o.Decisions.Decision(pod.UID); ok && restored {
		klog.V(2).InfoS("Admission was decided before a restart", "pod", klog.KObj(pod), "podUID", pod.UID, "admitted", admitted, "reason", reason)
		if admitted {
			return Verdict{}
		}
		return Reject(reason, message)
	}
	v := a.judge(Attributes{Pod: pod, Active: active, Node: a.o.Node()})
	a.o.Decisions.Decide(pod, v.Admitted(), v.Reason, v.Message)
	return v
}

func (a *Admitter) judge(attrs Attributes) Verdict {
	for _, h := range a.o.Handlers {
		if v := h.Admit(attrs); !v.Admitted() {
			return v
		}
	}
	return Verdict{}
}

type noDecisions struct{}

func (noDecisions) Decision(types.UID) (bool, string, string, bool) { return false, "", "", false }
func (noDecisions) Decide(*v1.Pod, bool, string, string)            {}
