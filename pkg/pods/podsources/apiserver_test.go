package podsources

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/nodelet/nodelet/internal/kubeclienttest"
)

func podNames(pods []*v1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	sort.Strings(out)
	return out
}

// The API source delivers the whole set of the node's pods after the
// initial list and after every watch event.
func TestAPISourceDeliversTheWholeSet(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mk := func(name string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)}, Spec: v1.PodSpec{NodeName: "node1"}}
	}
	client := fake.NewClientset(mk("a"))
	rec := &setRecorder{sets: make(chan []*v1.Pod, 100)}
	go NewAPISource(kubeclienttest.Wrap(client), "node1", rec).Run(ctx)

	next := func(want ...string) {
		t.Helper()
		select {
		case set := <-rec.sets:
			if got := strings.Join(podNames(set), ","); got != strings.Join(want, ",") {
				t.Fatalf("set %v, want %v", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no set delivered; want %v", want)
		}
	}
	next("ns/a")
	if _, err := client.CoreV1().Pods("ns").Create(ctx, mk("b"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	next("ns/a", "ns/b")
	if err := client.CoreV1().Pods("ns").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	next("ns/b")
}

func TestStripManagedFields(t *testing.T) {
	s := stripManagedFields{cache.NewStore(cache.MetaNamespaceKeyFunc)}
	p := &v1.Pod{}
	p.Name, p.ManagedFields = "a", []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	if err := s.Add(p); err != nil {
		t.Fatal(err)
	}
	q := p.DeepCopy()
	q.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	if err := s.Replace([]interface{}{q}, "1"); err != nil {
		t.Fatal(err)
	}
	got, _, _ := s.GetByKey("a")
	if mf := got.(*v1.Pod).ManagedFields; mf != nil {
		t.Fatalf("managedFields kept: %v", mf)
	}
}
