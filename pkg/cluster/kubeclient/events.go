package kubeclient

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
)

// NewEventBroadcaster returns client-go's event broadcaster, with the
// caches of the correlator it runs before the sink sized for a node of
// maxPods pods (EventCacheSize).
func NewEventBroadcaster(ctx context.Context, maxPods int) record.EventBroadcaster {
	return record.NewBroadcaster(record.WithContext(ctx),
		record.WithCorrelatorOptions(record.CorrelatorOptions{LRUCacheSize: EventCacheSize(maxPods)}))
}

// EventCacheSize bounds each of the correlator's three caches: one entry
// per object (its spam filter), per object and reason (aggregation) and
// per message (deduplication). client-go's 4,096 entries each fill only
// once a thousand pods or so have come and gone, and then hold about
// 4 MiB for pods long deleted: twice that in resident memory under the
// garbage collector's headroom, for as long as the node runs. Four
// entries per pod the node can hold keep every live pod's recent events
// (an evicted entry costs only a restart of its count: aggregation after
// 10 alike events in 10 minutes, deduplication into a count).
func EventCacheSize(maxPods int) int { return max(512, 4*maxPods) }

// EventSink writes the event recorder's events (k8s.io/client-go/tools/record)
// through the client, in each event's namespace, as client-go's
// EventSinkImpl does through a clientset.
type EventSink struct{ Client Interface }

func (s EventSink) Create(e *v1.Event) (*v1.Event, error) {
	if e.Namespace == "" {
		return nil, fmt.Errorf("event %s has no namespace", e.Name)
	}
	return s.Client.CoreV1().Events(e.Namespace).Create(context.TODO(), e, metav1.CreateOptions{})
}

func (s EventSink) Update(e *v1.Event) (*v1.Event, error) {
	return s.Client.CoreV1().Events(e.Namespace).Update(context.TODO(), e, metav1.UpdateOptions{})
}

func (s EventSink) Patch(e *v1.Event, data []byte) (*v1.Event, error) {
	return s.Client.CoreV1().Events(e.Namespace).Patch(context.TODO(), e.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
}
