package pleg

import (
	"errors"
	"testing"
	"time"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// Before the first complete relist the cache cannot say a pod has
// nothing running (it may not be read yet); after it, it can.
func TestUnknownPodBeforeTheFirstRelist(t *testing.T) {
	c := NewCache()
	if s, err := c.Get("p"); !errors.Is(err, ErrNotRelisted) {
		t.Fatalf("before the first relist: %v %v", s, err)
	}
	c.MarkRelisted(time.Unix(1000, 0))
	if _, err := c.Get("p"); err != nil {
		t.Fatalf("after the first relist: %v", err)
	}
}

// A pod whose sandboxes have all stopped keeps the IPs it ran with (the
// runtime reports none for a stopped sandbox); a ready sandbox's IPs, or
// its lack of them, always win.
func TestStoppedPodKeepsItsIPs(t *testing.T) {
	c := NewCache()
	ready := &container.PodStatus{ID: "p", IPs: []string{"10.88.0.5"},
		SandboxStatuses: []*container.SandboxStatus{{ID: "s1", Ready: true, IPs: []string{"10.88.0.5"}}}}
	c.Set("p", ready, nil, time.Unix(1, 0))
	stopped := &container.PodStatus{ID: "p", SandboxStatuses: []*container.SandboxStatus{{ID: "s1"}}}
	c.Set("p", stopped, nil, time.Unix(2, 0))
	if got, _ := c.Get("p"); len(got.IPs) != 1 || got.IPs[0] != "10.88.0.5" {
		t.Fatalf("stopped pod's IPs %v, want the ones it ran with", got.IPs)
	}
	// A new sandbox, ready without an address yet, reports none.
	renewed := &container.PodStatus{ID: "p", SandboxStatuses: []*container.SandboxStatus{{ID: "s2", Ready: true}, {ID: "s1"}}}
	c.Set("p", renewed, nil, time.Unix(3, 0))
	if got, _ := c.Get("p"); len(got.IPs) != 0 {
		t.Fatalf("IPs %v with a ready sandbox that has none", got.IPs)
	}
}
