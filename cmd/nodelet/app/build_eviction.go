package app

import (
	"context"
	"fmt"
	"time"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/pkg/node/eviction"
	"github.com/nodelet/nodelet/pkg/pods/kubelet"
	"github.com/nodelet/nodelet/pkg/runtime/kuberuntime"
)

// evictionInterval is how often eviction measures the node (upstream's
// monitoring interval).
const evictionInterval = 10 * time.Second

// buildEviction is node-pressure eviction over the configured thresholds:
// under disk pressure it first removes unused images and every dead
// container, then evicts pods through the core.
func buildEviction(b *base, runtime *runtimeParts, node *nodeParts, core *coreParts) ([]component, error) {
	c := b.cfg
	hard, soft, err := evictionThresholds(c)
	if err != nil {
		return nil, err
	}
	reclaim, err := eviction.ParseThresholds(c.EvictionMinimumReclaim)
	if err != nil {
		return nil, fmt.Errorf("evictionMinimumReclaim: %w", err)
	}
	grace := map[string]time.Duration{}
	for signal, d := range c.EvictionSoftGracePeriod {
		grace[signal], _ = time.ParseDuration(d) // validated
	}
	gc := runtime.manager.ContainerGC()
	m := eviction.New(eviction.Options{
		Pods: evictablePods{core.kubelet.View(), core.kubelet}, PodCleanedUp: core.workers.ShouldPodBeFinished, Stats: node.stats, Hard: hard, Soft: soft, SoftGracePeriod: grace, MinReclaim: reclaim,
		MaxPodGracePeriod: int64(c.EvictionMaxPodGracePeriod),
		DiskReclaims: []eviction.Reclaim{
			{Name: "unused images", Func: runtime.imageGC.DeleteUnused},
			{Name: "dead containers", Func: func(ctx context.Context) error {
				return gc.GarbageCollect(ctx, kuberuntime.GCPolicy{MaxPerPodContainer: 0}, core.workers)
			}},
		},
		Conditions: node.pressure, Recorder: b.recorder, Clock: b.clock, Interval: evictionInterval,
	})
	return []component{runs("eviction manager", m.Run)}, nil
}

// evictionThresholds are evictionHard (upstream's defaults when unset)
// and evictionSoft, parsed.
func evictionThresholds(c *kubeletv1beta1.KubeletConfiguration) (hard, soft eviction.Thresholds, err error) {
	if hard, err = eviction.ParseThresholds(evictionHard(c)); err != nil {
		return nil, nil, fmt.Errorf("evictionHard: %w", err)
	}
	if soft, err = eviction.ParseThresholds(c.EvictionSoft); err != nil {
		return nil, nil, fmt.Errorf("evictionSoft: %w", err)
	}
	return hard, soft, nil
}

// evictablePods are the active pods the eviction manager chooses from,
// and the core that evicts them.
type evictablePods struct {
	*kubelet.PodView
	*kubelet.Kubelet
}
