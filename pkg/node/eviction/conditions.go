package eviction

import (
	"sort"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Conditions are the node's pressure conditions (MemoryPressure,
// DiskPressure, PIDPressure), as the eviction manager last judged them:
// the node status reports them and admission refuses pods under them.
// Only the manager updates them, from the same measure and thresholds it
// evicts on, so a condition and an eviction can never disagree.
type Conditions struct {
	// transition is how long a condition stays after its signal last
	// crossed (evictionPressureTransitionPeriod), so a node hovering at
	// the line does not flap.
	transition time.Duration
	clock      clock.PassiveClock

	mu sync.Mutex
	// lastCrossed is when each condition's signal was last below its
	// threshold; messages say by how much.
	lastCrossed map[v1.NodeConditionType]time.Time
	messages    map[v1.NodeConditionType]string
}

// NewConditions returns conditions under no pressure.
func NewConditions(transition time.Duration, clk clock.PassiveClock) *Conditions {
	return &Conditions{transition: transition, clock: clk,
		lastCrossed: map[v1.NodeConditionType]time.Time{}, messages: map[v1.NodeConditionType]string{}}
}

// update takes the signals crossed at a measure, each with its message.
func (c *Conditions) update(crossed map[string]string) {
	now := c.clock.Now()
	signals := make([]string, 0, len(crossed))
	for s := range crossed {
		signals = append(signals, s)
	}
	sort.Strings(signals)
	fresh := map[v1.NodeConditionType][]string{}
	for _, s := range signals {
		cond := signalCondition[s]
		fresh[cond] = append(fresh[cond], crossed[s])
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for cond, msgs := range fresh {
		if _, was := c.messages[cond]; !was {
			klog.InfoS("Node is under pressure", "condition", cond, "signals", msgs)
		}
		c.lastCrossed[cond], c.messages[cond] = now, strings.Join(msgs, "; ")
	}
	for cond, at := range c.lastCrossed {
		if _, still := fresh[cond]; !still && now.Sub(at) >= c.transition {
			klog.InfoS("Node is no longer under pressure", "condition", cond)
			delete(c.lastCrossed, cond)
			delete(c.messages, cond)
		}
	}
}

// Pressure returns the conditions under pressure, each with its message.
func (c *Conditions) Pressure() map[v1.NodeConditionType]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[v1.NodeConditionType]string, len(c.messages))
	for cond, msg := range c.messages {
		out[cond] = msg
	}
	return out
}
