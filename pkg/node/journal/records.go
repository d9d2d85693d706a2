package journal

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/observe/timeline"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// podRecord is a pod as its source last delivered it.
type podRecord struct {
	Source string    `json:"source"`
	Pod    *v1.Pod   `json:"pod"`
	At     time.Time `json:"at"`
}

// Decision is a pod's admission decision.
type Decision struct {
	Admitted bool      `json:"admitted"`
	Reason   string    `json:"reason,omitempty"`
	Message  string    `json:"message,omitempty"`
	At       time.Time `json:"at"`
}

// StatusRecord is a pod's newest status; Finished once the pod was
// terminated for good (its status then never changes again).
type StatusRecord struct {
	Status   v1.PodStatus `json:"status"`
	Finished bool         `json:"finished,omitempty"`
	At       time.Time    `json:"at"`
}

// TokenRecord is a service account token a pod's volume holds.
type TokenRecord struct {
	Namespace      string    `json:"namespace"`
	ServiceAccount string    `json:"serviceAccount"`
	Pod            types.UID `json:"pod,omitempty"`
	Token          string    `json:"token"`
	Expires        time.Time `json:"expires"`
}

// objectRecord is a configMap or secret, as the API server returned it.
type objectRecord struct {
	Object json.RawMessage `json:"object"`
	At     time.Time       `json:"at"`
}

// ProbeRecord is a container's last result of one probe: who it is
// (pod UID, container name and runtime ID), the probe (Liveness,
// Readiness or Startup) and its result (Success or Failure), when it was
// last confirmed, and for how long it may be trusted after that (the
// probe's period times its failure threshold).
type ProbeRecord struct {
	Pod         types.UID     `json:"pod"`
	Container   string        `json:"container"`
	ContainerID string        `json:"containerID"`
	Probe       string        `json:"probe"`
	Result      string        `json:"result"`
	At          time.Time     `json:"at"`
	ValidFor    time.Duration `json:"validFor"`
}

// probeKey is per container name, not instance: a new instance's result
// replaces the old one's.
func probeKey(r ProbeRecord) string {
	return string(r.Pod) + "/" + r.Container + "/" + r.Probe
}

// PutProbe records a container's probe result.
func (j *Journal) PutProbe(r ProbeRecord) { j.put(bucketProbes, probeKey(r), r) }

// PodEntry is what the journal holds about one pod.
type PodEntry struct {
	UID    types.UID
	Source string
	// Pod is nil when only the decision or status survived.
	Pod      *v1.Pod
	Decision *Decision
	Status   *StatusRecord
}

// TokenInfo describes a journaled token without its secret.
type TokenInfo struct {
	Key            string
	Namespace      string
	ServiceAccount string
	Pod            types.UID
	Expires        time.Time
}

// State is what the journal held when it was opened.
type State struct {
	Pods []PodEntry
	// Objects are the kind/namespace/name keys of the configMaps and
	// secrets held.
	Objects   []string
	Tokens    []TokenInfo
	Timelines []timeline.Timeline
	// Probes are the containers' last probe results.
	Probes []ProbeRecord
	// Damaged lists the records that failed their checks and were
	// skipped.
	Damaged []string
	// MovedAside names the file the journal was moved to because bbolt
	// could not open or check it, with the reason; empty otherwise.
	MovedAside, MovedAsideReason string
	// Size is the file's size in bytes.
	Size int64
}

// Pod returns the entry of a pod.
func (s *State) Pod(uid types.UID) (PodEntry, bool) {
	for _, p := range s.Pods {
		if p.UID == uid {
			return p, true
		}
	}
	return PodEntry{}, false
}

// load reads every record, skipping (and listing) those that fail their
// checks.
func load(db *bolt.DB) (*State, error) {
	s := &State{}
	byUID := map[types.UID]*PodEntry{}
	entry := func(uid types.UID) *PodEntry {
		if e, ok := byUID[uid]; ok {
			return e
		}
		e := &PodEntry{UID: uid}
		byUID[uid] = e
		return e
	}
	err := db.View(func(tx *bolt.Tx) error {
		s.Size = tx.Size()
		each := func(bucket string, fn func(key string, payload []byte) error) {
			_ = tx.Bucket([]byte(bucket)).ForEach(func(k, v []byte) error {
				payload, err := unseal(v)
				if err == nil {
					err = fn(string(k), payload)
				}
				if err != nil {
					klog.ErrorS(err, "Skipping a damaged node journal record", "bucket", bucket, "key", string(k))
					s.Damaged = append(s.Damaged, bucket+"/"+string(k))
				}
				return nil
			})
		}
		each(bucketPods, func(k string, b []byte) error {
			var r podRecord
			if err := json.Unmarshal(b, &r); err != nil || r.Pod == nil {
				return fmt.Errorf("%w: pod record: %v", ErrDamaged, err)
			}
			e := entry(types.UID(k))
			e.Source, e.Pod = r.Source, r.Pod
			return nil
		})
		each(bucketDecisions, func(k string, b []byte) error {
			var d Decision
			if err := json.Unmarshal(b, &d); err != nil {
				return fmt.Errorf("%w: decision: %v", ErrDamaged, err)
			}
			entry(types.UID(k)).Decision = &d
			return nil
		})
		each(bucketStatuses, func(k string, b []byte) error {
			var r StatusRecord
			if err := json.Unmarshal(b, &r); err != nil {
				return fmt.Errorf("%w: status: %v", ErrDamaged, err)
			}
			entry(types.UID(k)).Status = &r
			return nil
		})
		each(bucketObjects, func(k string, b []byte) error {
			s.Objects = append(s.Objects, k)
			return nil
		})
		each(bucketTokens, func(k string, b []byte) error {
			var r TokenRecord
			if err := json.Unmarshal(b, &r); err != nil {
				return fmt.Errorf("%w: token: %v", ErrDamaged, err)
			}
			s.Tokens = append(s.Tokens, TokenInfo{Key: k, Namespace: r.Namespace, ServiceAccount: r.ServiceAccount, Pod: r.Pod, Expires: r.Expires})
			return nil
		})
		each(bucketProbes, func(k string, b []byte) error {
			var r ProbeRecord
			if err := json.Unmarshal(b, &r); err != nil {
				return fmt.Errorf("%w: probe result: %v", ErrDamaged, err)
			}
			s.Probes = append(s.Probes, r)
			return nil
		})
		each(bucketTimelines, func(k string, b []byte) error {
			var t timeline.Timeline
			if err := json.Unmarshal(b, &t); err != nil {
				return fmt.Errorf("%w: timeline: %v", ErrDamaged, err)
			}
			s.Timelines = append(s.Timelines, t)
			return nil
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, e := range byUID {
		s.Pods = append(s.Pods, *e)
	}
	sort.Slice(s.Pods, func(i, j int) bool { return entryName(s.Pods[i]) < entryName(s.Pods[j]) })
	return s, nil
}

func entryName(e PodEntry) string {
	if e.Pod == nil {
		return "~" + string(e.UID)
	}
	return e.Pod.Namespace + "/" + e.Pod.Name + "/" + string(e.UID)
}

// SourcePods returns the pods of one source, for the merge to restore. A
// pod that finished by nodelet's account carries that status, even if the
// source never learnt it: its worker must see it finished, not start it.
func (s *State) SourcePods(source string) []*v1.Pod {
	var out []*v1.Pod
	for _, p := range s.Pods {
		if p.Pod == nil || p.Source != source {
			continue
		}
		pod := p.Pod
		if p.Status != nil && podutil.IsTerminal(p.Status.Status.Phase) && !podutil.IsTerminal(pod.Status.Phase) {
			pod = pod.DeepCopy()
			pod.Status = p.Status.Status
		}
		out = append(out, pod)
	}
	return out
}

// PutPod records a pod as its source delivered it.
func (j *Journal) PutPod(source string, pod *v1.Pod) {
	j.put(bucketPods, string(pod.UID), podRecord{Source: source, Pod: pod, At: j.o.Clock.Now()})
}

// ForgetPod drops what the journal holds about a pod that left its
// source.
func (j *Journal) ForgetPod(uid types.UID) {
	j.mu.Lock()
	delete(j.decisions, uid)
	j.mu.Unlock()
	del := op{del: true}
	j.queue(map[bkey]op{{bucketPods, string(uid)}: del, {bucketDecisions, string(uid)}: del, {bucketStatuses, string(uid)}: del})
}

// Decide records a pod's admission decision.
func (j *Journal) Decide(pod *v1.Pod, admitted bool, reason, message string) {
	d := Decision{Admitted: admitted, Reason: reason, Message: message, At: j.o.Clock.Now()}
	j.mu.Lock()
	j.decisions[pod.UID] = d
	j.mu.Unlock()
	j.put(bucketDecisions, string(pod.UID), d)
}

// Decision returns a pod's admission decision, if one was recorded.
func (j *Journal) Decision(uid types.UID) (admitted bool, reason, message string, ok bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	d, ok := j.decisions[uid]
	return d.Admitted, d.Reason, d.Message, ok
}

// PodStatus records a pod's newest status.
func (j *Journal) PodStatus(uid types.UID, status *v1.PodStatus, finished bool) {
	j.put(bucketStatuses, string(uid), StatusRecord{Status: *status, Finished: finished, At: j.o.Clock.Now()})
}

func objectKey(kind, namespace, name string) string { return kind + "/" + namespace + "/" + name }

// PutObject records a configMap or secret as the API server returned it.
func (j *Journal) PutObject(kind, namespace, name string, obj any) {
	b, err := json.Marshal(obj)
	if err != nil {
		klog.ErrorS(err, "Cannot encode an object for the node journal", "kind", kind, "object", namespace+"/"+name)
		return
	}
	j.put(bucketObjects, objectKey(kind, namespace, name), objectRecord{Object: b, At: j.o.Clock.Now()})
}

// Object reads a configMap or secret into obj.
func (j *Journal) Object(kind, namespace, name string, obj any) (bool, error) {
	var r objectRecord
	ok, err := j.get(bucketObjects, objectKey(kind, namespace, name), &r)
	if !ok || err != nil {
		return false, err
	}
	return true, json.Unmarshal(r.Object, obj)
}

// PutToken records a service account token.
func (j *Journal) PutToken(key string, r TokenRecord) { j.put(bucketTokens, key, r) }

// Token reads a service account token.
func (j *Journal) Token(key string) (TokenRecord, bool, error) {
	var r TokenRecord
	ok, err := j.get(bucketTokens, key, &r)
	return r, ok, err
}

// timelineKey orders finished timelines by when they finished.
func timelineKey(finished time.Time, uid types.UID) string {
	return finished.UTC().Format("2006-01-02T15:04:05.000000000Z") + "/" + string(uid)
}

// PutTimeline records a finished pod's timeline.
func (j *Journal) PutTimeline(t timeline.Timeline) {
	j.put(bucketTimelines, timelineKey(j.o.Clock.Now(), t.UID), t)
}
