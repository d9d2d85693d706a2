package journal

import (
	"encoding/json"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/cluster/apiclient"
)

// prune keeps the journal bounded by what the node runs. A pod's records
// go when it leaves its source (ForgetPod); prune removes what is left
// over: statuses, decisions and probe results of pods no longer recorded, configMaps,
// secrets and tokens no recorded pod refers to, expired tokens, all but
// the newest KeepTimelines timelines, and, with a retention period, the
// records of pods that finished longer ago than that.
func (j *Journal) prune() {
	// The queue is committed first: a pod's record is always queued
	// before its status and decision, so none of these looks orphaned
	// merely because its pod is still in the queue.
	j.commit()
	j.mu.Lock()
	queued := map[string]bool{}
	for k := range j.pending {
		queued[k.key] = true
	}
	j.mu.Unlock()
	now := j.o.Clock.Now()
	removed := 0
	err := j.db.Update(func(tx *bolt.Tx) error {
		del := func(bucket string, keys []string) error {
			b := tx.Bucket([]byte(bucket))
			for _, k := range keys {
				if err := b.Delete([]byte(k)); err != nil {
					return err
				}
				removed++
			}
			return nil
		}
		pods, refs := livePods(tx, j, now)

		for _, step := range []struct {
			bucket string
			stale  func(k string, v []byte) bool
		}{
			{bucketPods, func(k string, _ []byte) bool { return !pods[k] }},
			{bucketDecisions, func(k string, _ []byte) bool { return !pods[k] && !queued[k] }},
			{bucketStatuses, func(k string, _ []byte) bool { return !pods[k] && !queued[k] }},
			{bucketObjects, func(k string, _ []byte) bool { return !refs[k] && !queued[k] }},
			// A probe result goes with its pod's record.
			{bucketProbes, func(k string, _ []byte) bool {
				uid, _, _ := strings.Cut(k, "/")
				return !pods[uid] && !queued[k]
			}},
			{bucketTokens, func(k string, v []byte) bool {
				var r TokenRecord
				return !queued[k] && (decode(v, &r) != nil || !r.Expires.After(now) || (r.Pod != "" && !pods[string(r.Pod)]))
			}},
		} {
			var stale []string
			_ = tx.Bucket([]byte(step.bucket)).ForEach(func(k, v []byte) error {
				if step.stale(string(k), v) {
					stale = append(stale, string(k))
				}
				return nil
			})
			if err := del(step.bucket, stale); err != nil {
				return err
			}
			if step.bucket == bucketObjects {
				j.mu.Lock()
				for _, k := range stale {
					delete(j.versions, k)
				}
				j.mu.Unlock()
			}
		}
		return del(bucketTimelines, oldTimelines(tx, j.o.KeepTimelines))
	})
	if err != nil {
		klog.ErrorS(err, "Pruning the node journal")
		return
	}
	if removed > 0 {
		klog.V(2).InfoS("Pruned the node journal", "records", removed)
	}
}

// livePods returns the pods whose records stay (every recorded pod but
// those finished longer ago than the retention period), and the objects
// they refer to.
func livePods(tx *bolt.Tx, j *Journal, now time.Time) (pods, refs map[string]bool) {
	pods, refs = map[string]bool{}, map[string]bool{}
	statuses := tx.Bucket([]byte(bucketStatuses))
	_ = tx.Bucket([]byte(bucketPods)).ForEach(func(k, v []byte) error {
		var r podRecord
		if decode(v, &r) != nil || r.Pod == nil {
			return nil // damaged: it goes
		}
		if j.o.Retention > 0 {
			var s StatusRecord
			if sv := statuses.Get(k); sv != nil && decode(sv, &s) == nil && s.Finished && now.Sub(s.At) > j.o.Retention {
				return nil
			}
		}
		pods[string(k)] = true
		for _, ref := range apiclient.Referenced(r.Pod) {
			refs[ref] = true
		}
		for _, ref := range claimRefs(r.Pod) {
			refs[ref] = true
		}
		return nil
	})
	// A kept claim keeps its volume, and a kept volume its CSI driver.
	for _, kind := range []string{KindClaim, KindVolume} {
		_ = tx.Bucket([]byte(bucketObjects)).ForEach(func(k, v []byte) error {
			if refs[string(k)] && strings.HasPrefix(string(k), kind+"/") {
				for _, ref := range boundRefs(kind, v) {
					refs[ref] = true
				}
			}
			return nil
		})
	}
	keepAttachments(tx, refs)
	return pods, refs
}

// keepAttachments keeps the VolumeAttachment of each kept volume, and the
// node's list of attached volumes (one record): a CSI volume that needs
// attaching is set up again only with both.
func keepAttachments(tx *bolt.Tx, refs map[string]bool) {
	_ = tx.Bucket([]byte(bucketObjects)).ForEach(func(k, v []byte) error {
		key := string(k)
		switch {
		case strings.HasPrefix(key, KindAttachedVolumes+"/"):
			refs[key] = true
		case strings.HasPrefix(key, KindAttachment+"/"):
			var r objectRecord
			var va storagev1.VolumeAttachment
			if decode(v, &r) == nil && json.Unmarshal(r.Object, &va) == nil && va.Spec.Source.PersistentVolumeName != nil &&
				refs[objectKey(KindVolume, "", *va.Spec.Source.PersistentVolumeName)] {
				refs[key] = true
			}
		}
		return nil
	})
}

// Kinds of the objects kept for claims, beside apiclient.KindConfigMap
// and apiclient.KindSecret.
const (
	KindClaim      = "persistentvolumeclaim"
	KindVolume     = "persistentvolume"
	KindCSIDriver  = "csidriver"
	KindAttachment = "volumeattachment"
	// KindAttachedVolumes is the node's status.volumesAttached.
	KindAttachedVolumes = "attachedvolumes"
)

// claimRefs lists the claims a pod's volumes mount, as object keys.
func claimRefs(pod *v1.Pod) []string {
	var out []string
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			out = append(out, objectKey(KindClaim, pod.Namespace, v.PersistentVolumeClaim.ClaimName))
		case v.Ephemeral != nil:
			out = append(out, objectKey(KindClaim, pod.Namespace, pod.Name+"-"+v.Name))
		case v.CSI != nil:
			out = append(out, objectKey(KindCSIDriver, "", v.CSI.Driver))
		}
	}
	return out
}

// boundRefs lists what a kept claim or volume refers to: a claim its
// volume, a volume its CSI driver.
func boundRefs(kind string, sealed []byte) []string {
	var r objectRecord
	if decode(sealed, &r) != nil {
		return nil
	}
	if kind == KindClaim {
		var pvc v1.PersistentVolumeClaim
		if json.Unmarshal(r.Object, &pvc) != nil || pvc.Spec.VolumeName == "" {
			return nil
		}
		return []string{objectKey(KindVolume, "", pvc.Spec.VolumeName)}
	}
	var pv v1.PersistentVolume
	if json.Unmarshal(r.Object, &pv) != nil || pv.Spec.CSI == nil {
		return nil
	}
	return []string{objectKey(KindCSIDriver, "", pv.Spec.CSI.Driver)}
}

// decode unseals and decodes one record.
func decode(sealed []byte, v any) error {
	payload, err := unseal(sealed)
	if err != nil {
		return err
	}
	return json.Unmarshal(payload, v)
}

// oldTimelines lists all but the newest keep timelines (their keys sort
// by finish time).
func oldTimelines(tx *bolt.Tx, keep int) []string {
	var keys []string
	_ = tx.Bucket([]byte(bucketTimelines)).ForEach(func(k, _ []byte) error {
		keys = append(keys, string(k))
		return nil
	})
	if len(keys) <= keep {
		return nil
	}
	return keys[:len(keys)-keep]
}
