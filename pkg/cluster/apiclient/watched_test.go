package apiclient

import (
	"context"
	"fmt"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodelet/nodelet/internal/kubeclienttest"
	"github.com/nodelet/nodelet/internal/testutil"
)

func configMap(ns, name, value string) *v1.ConfigMap {
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"k": value}}
}

func podUsing(uid, ns string, volumes ...v1.Volume) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: uid, Namespace: ns}}
	p.Spec.Volumes = volumes
	return p
}

func configMapVolume(name string) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: name}}}}
}

// changes records what onChange was told.
type changes struct {
	mu   sync.Mutex
	uids []types.UID
}

func (c *changes) record(uids []types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.uids = append(c.uids, uids...)
}

func (c *changes) count(uid types.UID) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, u := range c.uids {
		if u == uid {
			n++
		}
	}
	return n
}

func TestReferencesCoverEverySourceOnce(t *testing.T) {
	optional := true
	pod := podUsing("a", "ns", configMapVolume("vol-cm"),
		v1.Volume{Name: "s", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "vol-secret"}}},
		v1.Volume{Name: "p", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "proj-cm"}}},
			{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "proj-secret"}}},
		}}}})
	pod.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "pull"}}
	pod.Spec.InitContainers = []v1.Container{{Name: "i", EnvFrom: []v1.EnvFromSource{
		{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "envfrom-cm"}}}}}}
	pod.Spec.Containers = []v1.Container{{Name: "c", Env: []v1.EnvVar{
		{Name: "A", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "env-secret"}, Key: "k", Optional: &optional}}},
		// The same configMap twice is one reference.
		{Name: "B", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "vol-cm"}, Key: "k"}}},
	}}}
	got := fmt.Sprint(references(pod))
	want := "[configmap ns/envfrom-cm configmap ns/proj-cm configmap ns/vol-cm secret ns/env-secret secret ns/proj-secret secret ns/pull secret ns/vol-secret]"
	if got != want {
		t.Fatalf("references\n got %s\nwant %s", got, want)
	}
}

// TestRegisteredObjectChangeSyncsItsPods: a change to a watched
// configMap is reported for the pods that refer to it; once the last of
// them unregisters, the watch stops.
func TestRegisteredObjectChangeSyncsItsPods(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(configMap("ns", "cfg", "1"), configMap("other", "cfg", "1"))
	var seen changes
	m := New(Options{Client: kubeclienttest.Wrap(client), NodeName: "n1", OnChange: seen.record})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- m.Run(runCtx) }()
	defer func() { stop(); testutil.Must(t, <-done) }()

	a, b := podUsing("a", "ns", configMapVolume("cfg")), podUsing("b", "other", configMapVolume("cfg"))
	m.RegisterPod(a)
	m.RegisterPod(b)
	if n := m.Watching(); n != 2 {
		t.Fatalf("watching %d objects, want 2 (one configMap in each namespace)", n)
	}
	// Served from the watch once it listed.
	cm, err := m.GetConfigMap(ctx, "ns", "cfg")
	if err != nil || cm.Data["k"] != "1" {
		t.Fatalf("GetConfigMap: %v %v", cm, err)
	}
	// The initial list counts as a change; wait for it so the update is
	// told apart.
	testutil.WaitFor(t, "the initial list", func() bool { return seen.count("a") >= 1 })
	before := seen.count("a")
	if _, err := client.CoreV1().ConfigMaps("ns").Update(ctx, configMap("ns", "cfg", "2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the update to reach pod a", func() bool { return seen.count("a") > before })
	testutil.WaitFor(t, "the watch to see the update", func() bool {
		cm, err := m.GetConfigMap(ctx, "ns", "cfg")
		return err == nil && cm.Data["k"] == "2"
	})

	m.UnregisterPod(a)
	if n := m.Watching(); n != 1 {
		t.Fatalf("watching %d objects after a left, want 1", n)
	}
	// A change after a left reaches nobody for a; b's object still
	// reports, which proves changes still flow.
	beforeA, beforeB := seen.count("a"), seen.count("b")
	if _, err := client.CoreV1().ConfigMaps("ns").Update(ctx, configMap("ns", "cfg", "3"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().ConfigMaps("other").Update(ctx, configMap("other", "cfg", "3"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the update to reach pod b", func() bool { return seen.count("b") > beforeB })
	if n := seen.count("a"); n != beforeA {
		t.Fatalf("pod a was told of a change after it unregistered (%d -> %d)", beforeA, n)
	}
}

// TestUnregisteredObjectsAreReadDirectly: an object no pod registered is
// read from the API server, and a missing one is NotFound.
func TestUnregisteredObjectsAreReadDirectly(t *testing.T) {
	ctx := context.Background()
	secret := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}, Data: map[string][]byte{"k": []byte("v")}}
	client := fake.NewClientset(secret)
	m := New(Options{Client: kubeclienttest.Wrap(client), NodeName: "n1"})
	got, err := m.GetSecret(ctx, "ns", "s")
	if err != nil || string(got.Data["k"]) != "v" {
		t.Fatalf("GetSecret: %v %v", got, err)
	}
	gets := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "secrets" {
			gets++
		}
	}
	if gets != 1 || m.Watching() != 0 {
		t.Fatalf("%d direct gets, %d watches; want 1 and 0", gets, m.Watching())
	}
	if _, err := m.GetConfigMap(ctx, "ns", "missing"); !apierrors.IsNotFound(err) {
		t.Fatalf("missing configMap: %v", err)
	}
}

// TestServicesAppearOnceListed: no services before the watch listed; then
// a namespace's, or all of them.
func TestServicesAppearOnceListed(t *testing.T) {
	svc := func(ns, name string) *v1.Service {
		return &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	m := New(Options{Client: kubeclienttest.Wrap(fake.NewClientset(svc("ns", "web"), svc("default", "kubernetes"))), NodeName: "n1"})
	if got := m.Services(""); got != nil {
		t.Fatalf("services before the watch ran: %v", got)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	defer func() { stop(); testutil.Must(t, <-done) }()
	testutil.WaitFor(t, "the services", func() bool { return len(m.Services("")) == 2 })
	if got := m.Services("ns"); len(got) != 1 || got[0].Name != "web" {
		t.Fatalf("services of ns: %v", got)
	}
}
