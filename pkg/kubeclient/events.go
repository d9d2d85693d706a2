package kubeclient

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

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
