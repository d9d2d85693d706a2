package eviction

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// localStorage evicts every pod over one of its own local storage limits,
// whatever the node's signals: an emptyDir over its sizeLimit, the pod over
// the sum of its containers' ephemeral-storage limits, or a container over
// its own (writable layer plus logs). As upstream, these come first, and an
// interval that evicts for them evicts for nothing else. limited are the
// active pods with such a limit (hasLocalLimit).
func (m *Manager) localStorage(ctx context.Context, summary *statsapi.Summary, limited []*v1.Pod) []*v1.Pod {
	stats := map[types.UID]*statsapi.PodStats{}
	for i := range summary.Pods {
		stats[types.UID(summary.Pods[i].PodRef.UID)] = &summary.Pods[i]
	}
	var out []*v1.Pod
	for _, pod := range limited {
		ps, ok := stats[pod.UID]
		if !ok {
			continue
		}
		if msg := overLocalLimit(pod, ps); msg != "" {
			klog.InfoS("Eviction manager: pod over its local storage limit", "pod", klog.KObj(pod), "podUID", pod.UID, "message", msg)
			m.o.Recorder.Event(pod, v1.EventTypeWarning, Reason, msg)
			m.o.Pods.EvictPod(pod, hardGracePeriod, evicted(pod, msg))
			out = append(out, pod)
		}
	}
	for _, pod := range out {
		m.waitForCleanup(ctx, pod)
	}
	return out
}

// hasLocalLimit says whether eviction must measure the pod for limits of
// its own: an emptyDir's sizeLimit or a container's ephemeral-storage
// limit. A critical pod is never evicted for them.
func hasLocalLimit(pod *v1.Pod) bool {
	if podutil.IsCritical(pod) {
		return false
	}
	for _, v := range pod.Spec.Volumes {
		if e := v.EmptyDir; e != nil && e.SizeLimit != nil && !e.SizeLimit.IsZero() {
			return true
		}
	}
	for _, c := range pod.Spec.Containers {
		if _, ok := c.Resources.Limits[v1.ResourceEphemeralStorage]; ok {
			return true
		}
	}
	return false
}

// overLocalLimit returns upstream's message for the first local storage
// limit the pod is over, or "".
func overLocalLimit(pod *v1.Pod, ps *statsapi.PodStats) string {
	volumes := map[string]uint64{}
	for _, v := range ps.VolumeStats {
		if v.UsedBytes != nil {
			volumes[v.Name] = *v.UsedBytes
		}
	}
	for _, v := range pod.Spec.Volumes {
		if e := v.EmptyDir; e != nil && e.SizeLimit != nil && !e.SizeLimit.IsZero() {
			if used, ok := volumes[v.Name]; ok && e.SizeLimit.CmpInt64(int64(used)) < 0 {
				return fmt.Sprintf("Usage of EmptyDir volume %q exceeds the limit %q. ", v.Name, e.SizeLimit.String())
			}
		}
	}
	limits := map[string]resource.Quantity{}
	var podLimit resource.Quantity
	for _, c := range pod.Spec.Containers {
		if l, ok := c.Resources.Limits[v1.ResourceEphemeralStorage]; ok {
			limits[c.Name] = l
			podLimit.Add(l)
		}
	}
	if !podLimit.IsZero() && ps.EphemeralStorage != nil && ps.EphemeralStorage.UsedBytes != nil &&
		podLimit.CmpInt64(int64(*ps.EphemeralStorage.UsedBytes)) < 0 {
		return fmt.Sprintf("Pod ephemeral local storage usage exceeds the total limit of containers %s. ", podLimit.String())
	}
	for _, c := range ps.Containers {
		l, ok := limits[c.Name]
		if !ok || c.Rootfs == nil || c.Rootfs.UsedBytes == nil || c.Logs == nil || c.Logs.UsedBytes == nil {
			continue
		}
		if l.CmpInt64(int64(*c.Rootfs.UsedBytes+*c.Logs.UsedBytes)) < 0 {
			return fmt.Sprintf("Container %s exceeded its local ephemeral storage limit %q. ", c.Name, l.String())
		}
	}
	return ""
}
