package app

import (
	"testing"

	"github.com/nodelet/nodelet/cmd/nodelet/options"
)

// A drained node's pods all keep a readable timeline: at least maxPods
// finished ones are kept, and never fewer than 100.
func TestKeepFinishedCoversAFullNode(t *testing.T) {
	for maxPods, want := range map[int32]int{10: 100, 110: 110, 250: 250} {
		o := &options.Options{}
		o.Config.MaxPods = maxPods
		if got := keepFinished(&o.Config); got != want {
			t.Errorf("maxPods %d: keep %d finished timelines, want %d", maxPods, got, want)
		}
	}
}
