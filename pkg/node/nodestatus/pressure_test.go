package nodestatus

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
)

// The reporter turns pressure into conditions with upstream's reasons and
// records an event when one changes.
func TestReporterPressureConditions(t *testing.T) {
	var ready error
	r, client, clk := newReporter(t, &ready)
	pressure := map[v1.NodeConditionType]string{}
	r.o.Pressure = func() map[v1.NodeConditionType]string { return pressure }
	events := record.NewFakeRecorder(100)
	r.o.Recorder = events
	ctx := context.Background()
	if !r.register(ctx) {
		t.Fatal("registration failed")
	}
	condition := func(typ v1.NodeConditionType) v1.NodeCondition {
		for _, c := range getNode(t, client).Status.Conditions {
			if c.Type == typ {
				return c
			}
		}
		return v1.NodeCondition{}
	}
	r.SyncStatus(ctx)
	if c := condition(v1.NodeDiskPressure); c.Status != v1.ConditionFalse || c.Reason != "KubeletHasNoDiskPressure" {
		t.Fatalf("disk pressure %+v", c)
	}
	pressure[v1.NodeDiskPressure] = "nodefs.available is 1, below its threshold 2"
	clk.Step(10 * time.Second)
	useAPINode(t, r, client)
	r.SyncStatus(ctx)
	if c := condition(v1.NodeDiskPressure); c.Status != v1.ConditionTrue || c.Reason != "KubeletHasDiskPressure" || !strings.Contains(c.Message, "nodefs.available is 1") {
		t.Fatalf("disk pressure %+v", c)
	}
	delete(pressure, v1.NodeDiskPressure)
	clk.Step(10 * time.Second)
	useAPINode(t, r, client)
	r.SyncStatus(ctx)
	var got []string
	for len(events.Events) > 0 {
		if e := <-events.Events; strings.Contains(e, "DiskPressure") {
			got = append(got, e)
		}
	}
	if len(got) != 2 || !strings.Contains(got[0], "NodeHasDiskPressure") || !strings.Contains(got[1], "NodeHasNoDiskPressure") {
		t.Errorf("events %q, want NodeHasDiskPressure then NodeHasNoDiskPressure", got)
	}
}
