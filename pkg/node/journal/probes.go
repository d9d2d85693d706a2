package journal

import (
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/pods/prober"
)

// RestoredProbes are the probe results the journal kept, for the prober
// to start from; a record it cannot read is left out (the container is
// probed from scratch).
func RestoredProbes(s *State) []prober.Saved {
	var out []prober.Saved
	for _, r := range s.Probes {
		t, okT := parseProbe(r.Probe, prober.Liveness, prober.Readiness, prober.Startup)
		res, okR := parseProbe(r.Result, prober.Success, prober.Failure)
		if !okT || !okR {
			klog.InfoS("Skipping an unreadable probe result in the node journal", "podUID", r.Pod, "container", r.Container, "probe", r.Probe, "result", r.Result)
			continue
		}
		out = append(out, prober.Saved{Pod: r.Pod, Container: r.Container, ContainerID: r.ContainerID, Type: t, Result: res, At: r.At, ValidFor: r.ValidFor})
	}
	return out
}

func parseProbe[T interface{ String() string }](s string, of ...T) (T, bool) {
	for _, v := range of {
		if v.String() == s {
			return v, true
		}
	}
	var zero T
	return zero, false
}

// SaveProbe saves a probe result (prober.Options.Saved).
func (j *Journal) SaveProbe(r prober.Saved) {
	j.PutProbe(ProbeRecord{Pod: r.Pod, Container: r.Container, ContainerID: r.ContainerID,
		Probe: r.Type.String(), Result: r.Result.String(), At: r.At, ValidFor: r.ValidFor})
}
