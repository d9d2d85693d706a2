//go:build integration

package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// A node whose sync loop is wedged (a failpoint pauses it inside an
// iteration) must not look alive: /healthz fails and the Node goes
// NotReady naming the sync loop, and both recover once it moves again.
func TestStuckSyncLoopMakesTheNodeNotReady(t *testing.T) {
	n := startNode(t, "stuck-loop", cd, "nodeStatusUpdateFrequency: 2s\n")
	waitNodeReady(t, n.NodeName, 30*time.Second)
	if err := n.Healthz(); err != nil {
		t.Fatal(err)
	}

	n.Failpoint("sync-loop-iteration", "pause")
	start := time.Now()
	testbed.Eventually(t, 2*time.Minute, func() (bool, string) {
		err := n.Healthz()
		return err != nil, "healthz still ok"
	})
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		node, err := cl.Client.CoreV1().Nodes().Get(context.Background(), n.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := nodeCondition(node, v1.NodeReady)
		ok := c != nil && c.Status == v1.ConditionFalse && strings.Contains(c.Message, "sync loop last completed an iteration")
		return ok, fmt.Sprintf("ready condition %+v", c)
	})
	t.Logf("NotReady %v after the loop was wedged", time.Since(start).Round(time.Second))

	n.ClearFailpoint("sync-loop-iteration")
	waitNodeReady(t, n.NodeName, time.Minute)
	testbed.Eventually(t, 10*time.Second, func() (bool, string) {
		err := n.Healthz()
		return err == nil, fmt.Sprintf("healthz: %v", err)
	})
}
