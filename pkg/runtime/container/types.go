// Package container describes pods and containers as the runtime sees them,
// independent of CRI's wire types. kuberuntime produces these values, the
// PLEG caches them, and the pod workers and the kubelet core read them to
// decide what to do and to build the API status.
package container

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ContainerID names a container within a runtime, printed as type://id the
// way API container statuses show it.
type ContainerID struct {
	Type string
	ID   string
}

func (c ContainerID) String() string { return c.Type + "://" + c.ID }

// IsEmpty reports whether the ID names nothing.
func (c ContainerID) IsEmpty() bool { return c.ID == "" }

// ParseContainerID parses type://id; a bare id gets an empty type.
func ParseContainerID(s string) ContainerID {
	if typ, id, ok := strings.Cut(s, "://"); ok {
		return ContainerID{Type: typ, ID: id}
	}
	return ContainerID{ID: s}
}

// State is the lifecycle state of a container in the runtime.
type State string

const (
	StateCreated State = "created"
	StateRunning State = "running"
	StateExited  State = "exited"
	StateUnknown State = "unknown"
)

// Container is one container of a running pod, as listed by the runtime.
type Container struct {
	ID      ContainerID
	Name    string
	Image   string
	ImageID string
	Hash    string
	State   State
	// CreatedAt orders containers with the same name: newest wins.
	CreatedAt time.Time
}

// Sandbox is one pod sandbox as listed by the runtime.
type Sandbox struct {
	ID        string
	Ready     bool
	Attempt   uint32
	CreatedAt time.Time
}

// Pod is a pod as the runtime knows it: whatever sandboxes and containers
// carry its UID label. It may have no configuration behind it (an orphan).
type Pod struct {
	ID         types.UID
	Name       string
	Namespace  string
	Containers []*Container
	Sandboxes  []*Sandbox
}

// IsEmpty reports whether nothing of the pod exists in the runtime.
func (p *Pod) IsEmpty() bool { return p == nil || len(p.Containers)+len(p.Sandboxes) == 0 }

// ToAPIPod builds the minimal API pod that stands in for a runtime pod that
// has no configuration, so it can be logged and killed. It deliberately has
// no container specs: killing then reads each container's grace period and
// preStop hook from the runtime, where they were recorded at creation.
func (p *Pod) ToAPIPod() *v1.Pod {
	pod := &v1.Pod{}
	pod.UID, pod.Name, pod.Namespace = p.ID, p.Name, p.Namespace
	return pod
}

// FindContainerByName returns the newest container with the name.
func (p *Pod) FindContainerByName(name string) *Container {
	var best *Container
	for _, c := range p.Containers {
		if c.Name == name && (best == nil || c.CreatedAt.After(best.CreatedAt)) {
			best = c
		}
	}
	return best
}

// SandboxStatus is what the runtime reports about one sandbox.
type SandboxStatus struct {
	ID        string
	Ready     bool
	Attempt   uint32
	CreatedAt time.Time
	// IPs are the sandbox's pod IPs, primary first.
	IPs []string
	// HostNetwork is true when the sandbox shares the node's network.
	HostNetwork bool
}

// Status is what the runtime reports about one container.
type Status struct {
	ID   ContainerID
	Name string
	// SandboxID is the sandbox the container ran in: init progress only
	// counts containers of the current sandbox.
	SandboxID    string
	State        State
	CreatedAt    time.Time
	StartedAt    time.Time
	FinishedAt   time.Time
	ExitCode     int
	Image        string
	ImageID      string
	ImageRef     string
	Hash         string
	RestartCount int
	Reason       string
	Message      string
}

// PodStatus is the runtime's full view of one pod at a moment in time.
type PodStatus struct {
	ID        types.UID
	Name      string
	Namespace string
	// IPs are the pod's IPs from its newest sandbox.
	IPs []string
	// SandboxStatuses are newest first.
	SandboxStatuses []*SandboxStatus
	// ContainerStatuses are newest first within each name.
	ContainerStatuses []*Status
	// TimeStamp is when the status was read from the runtime.
	TimeStamp time.Time
}

// FindContainerStatusByName returns the newest status of the named container.
func (s *PodStatus) FindContainerStatusByName(name string) *Status {
	if s == nil {
		return nil
	}
	var best *Status
	for _, c := range s.ContainerStatuses {
		if c.Name == name && (best == nil || c.CreatedAt.After(best.CreatedAt)) {
			best = c
		}
	}
	return best
}

// StatusesByName returns every status of the named container, newest first.
func (s *PodStatus) StatusesByName(name string) []*Status {
	if s == nil {
		return nil
	}
	var out []*Status
	for _, c := range s.ContainerStatuses {
		if c.Name == name {
			out = append(out, c)
		}
	}
	sortNewestFirst(out)
	return out
}

// RunningContainers returns the statuses of containers still running.
func (s *PodStatus) RunningContainers() []*Status {
	if s == nil {
		return nil
	}
	var out []*Status
	for _, c := range s.ContainerStatuses {
		if c.State == StateRunning {
			out = append(out, c)
		}
	}
	return out
}

// ReadySandboxes counts the sandboxes that are ready.
func (s *PodStatus) ReadySandboxes() int {
	n := 0
	if s != nil {
		for _, sb := range s.SandboxStatuses {
			if sb.Ready {
				n++
			}
		}
	}
	return n
}

// IsTerminal reports whether nothing of the pod runs any more: no running
// container and no ready sandbox.
func (s *PodStatus) IsTerminal() bool {
	return len(s.RunningContainers()) == 0 && s.ReadySandboxes() == 0
}

// ToRunningPod converts a status to the running pod that killing needs.
func (s *PodStatus) ToRunningPod() Pod {
	p := Pod{ID: s.ID, Name: s.Name, Namespace: s.Namespace}
	for _, c := range s.ContainerStatuses {
		p.Containers = append(p.Containers, &Container{
			ID: c.ID, Name: c.Name, Image: c.Image, ImageID: c.ImageID, Hash: c.Hash, State: c.State, CreatedAt: c.CreatedAt,
		})
	}
	for _, sb := range s.SandboxStatuses {
		p.Sandboxes = append(p.Sandboxes, &Sandbox{ID: sb.ID, Ready: sb.Ready, Attempt: sb.Attempt, CreatedAt: sb.CreatedAt})
	}
	return p
}

func (s *PodStatus) String() string {
	if s == nil {
		return "<nil>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%s(%s) sandboxes=%d", s.Namespace, s.Name, s.ID, len(s.SandboxStatuses))
	for _, c := range s.ContainerStatuses {
		fmt.Fprintf(&b, " %s:%s", c.Name, c.State)
	}
	return b.String()
}
