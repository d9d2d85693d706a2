package kubeclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
)

// apiServer answers every call with obj, in protobuf when asked for it
// (as the API server does), and records what it was asked.
type apiServer struct {
	mu    sync.Mutex
	calls []string
}

func (a *apiServer) serve(t *testing.T, obj func(r *http.Request) runtime.Object) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		a.mu.Lock()
		a.calls = append(a.calls, fmt.Sprintf("%s %s [%s] %s", r.Method, r.URL.RequestURI(), r.Header.Get("Content-Type"), strings.TrimSpace(string(body))))
		a.mu.Unlock()
		o := obj(r)
		info, ok := runtime.SerializerInfoForMediaType(Codecs.SupportedMediaTypes(), strings.Split(r.Header.Get("Accept"), ",")[0])
		if !ok {
			info, _ = runtime.SerializerInfoForMediaType(Codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
		}
		w.Header().Set("Content-Type", info.MediaType)
		if err := Codecs.EncoderForVersion(info.Serializer, o.GetObjectKind().GroupVersionKind().GroupVersion()).Encode(o, w); err != nil {
			t.Errorf("encoding: %v", err)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestClientSpeaksTheAPI: the narrow client calls the API server's paths
// for each group, with the configured content type, and decodes the
// answers: a status patch, a token request (a subresource of another
// group's type), a cluster-scoped get, and events through the sink.
func TestClientSpeaksTheAPI(t *testing.T) {
	a := &apiServer{}
	srv := a.serve(t, func(r *http.Request) runtime.Object {
		switch {
		case strings.HasSuffix(r.URL.Path, "/token"):
			return &authenticationv1.TokenRequest{TypeMeta: metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "TokenRequest"},
				Status: authenticationv1.TokenRequestStatus{Token: "t0k3n"}}
		case strings.Contains(r.URL.Path, "/events"):
			return &v1.Event{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Event"}, ObjectMeta: metav1.ObjectMeta{Name: "e1", Namespace: "ns"}}
		case strings.Contains(r.URL.Path, "/nodes/"):
			return &v1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid"}}
		default:
			return &v1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: "ns", UID: "pod-uid"}}
		}
	})
	for _, ct := range []string{"application/vnd.kubernetes.protobuf", "application/json"} {
		t.Run(ct, func(t *testing.T) {
			a.calls = nil
			c, err := New(&rest.Config{Host: srv.URL, QPS: 50, Burst: 100, ContentConfig: rest.ContentConfig{ContentType: ct}})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			pod, err := c.CoreV1().Pods("ns").Patch(ctx, "p1", types.StrategicMergePatchType, []byte(`{"status":{"phase":"Running"}}`), metav1.PatchOptions{}, "status")
			if err != nil || pod.UID != "pod-uid" {
				t.Fatalf("patch: %v, %+v", err, pod)
			}
			tr, err := c.CoreV1().ServiceAccounts("ns").CreateToken(ctx, "default", &authenticationv1.TokenRequest{
				Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"api"}}}, metav1.CreateOptions{})
			if err != nil || tr.Status.Token != "t0k3n" {
				t.Fatalf("token: %v, %+v", err, tr)
			}
			node, err := c.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{ResourceVersion: "0"})
			if err != nil || node.UID != "node-uid" {
				t.Fatalf("node: %v, %+v", err, node)
			}
			ev, err := EventSink{Client: c}.Create(&v1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e1", Namespace: "ns"}})
			if err != nil || ev.Name != "e1" {
				t.Fatalf("event: %v, %+v", err, ev)
			}
			var _ record.EventSink = EventSink{}
			a.mu.Lock()
			defer a.mu.Unlock()
			want := []string{
				`PATCH /api/v1/namespaces/ns/pods/p1/status [application/strategic-merge-patch+json] {"status":{"phase":"Running"}}`,
				"POST /api/v1/namespaces/ns/serviceaccounts/default/token [" + ct + "]",
				"GET /api/v1/nodes/n1?resourceVersion=0 []",
				"POST /api/v1/namespaces/ns/events [" + ct + "]",
			}
			if len(a.calls) != len(want) {
				t.Fatalf("calls:\n%s", strings.Join(a.calls, "\n"))
			}
			for i, w := range want {
				if got := a.calls[i]; !strings.HasPrefix(got, w) {
					t.Errorf("call %d: %s\nwant:    %s", i, got, w)
				}
			}
			if ct == "application/json" {
				var body map[string]any
				if err := json.Unmarshal([]byte(strings.SplitN(a.calls[1], "] ", 2)[1]), &body); err != nil || body["kind"] != "TokenRequest" {
					t.Errorf("token request body %s: %v", a.calls[1], err)
				}
			}
		})
	}
}

// TestSchemeIsNarrow: the scheme knows the groups nodelet talks to and
// not the others: that is the point of this package.
func TestSchemeIsNarrow(t *testing.T) {
	for _, gv := range []string{"v1", "coordination.k8s.io/v1", "storage.k8s.io/v1", "resource.k8s.io/v1",
		"certificates.k8s.io/v1", "authentication.k8s.io/v1", "authorization.k8s.io/v1"} {
		if !Scheme.IsVersionRegistered(mustGV(t, gv)) {
			t.Errorf("%s is not registered", gv)
		}
	}
	for _, gv := range []string{"apps/v1", "batch/v1", "rbac.authorization.k8s.io/v1", "networking.k8s.io/v1"} {
		if Scheme.IsVersionRegistered(mustGV(t, gv)) {
			t.Errorf("%s is registered", gv)
		}
	}
}

func mustGV(t *testing.T, s string) schema.GroupVersion {
	t.Helper()
	gv, err := schema.ParseGroupVersion(s)
	if err != nil {
		t.Fatal(err)
	}
	return gv
}

// TestTypedCallsTheirPaths: each call of a typed client goes to its verb
// and path, with its options as parameters.
func TestTypedCallsTheirPaths(t *testing.T) {
	a := &apiServer{}
	srv := a.serve(t, func(r *http.Request) runtime.Object {
		if r.Method == http.MethodGet && !strings.HasSuffix(r.URL.Path, "/p1") {
			return &v1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}, Items: []v1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "p1"}}}}
		}
		if r.Method == http.MethodDelete {
			return &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusSuccess}
		}
		return &v1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: "ns"}}
	})
	c, err := New(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pods := c.CoreV1().Pods("ns")
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: "ns"}}
	secs := int64(5)
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "a=b", TimeoutSeconds: &secs})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("list: %v, %+v", err, list)
	}
	for _, call := range []func() error{
		func() error { _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); return err },
		func() error { _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); return err },
		func() error { return pods.Delete(ctx, "p1", metav1.DeleteOptions{}) },
		func() error {
			return c.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.nodeName=n1"})
		},
	} {
		if err := call(); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		"GET /api/v1/namespaces/ns/pods?labelSelector=a%3Db&timeout=5s&timeoutSeconds=5 ",
		"PUT /api/v1/namespaces/ns/pods/p1 ",
		"PUT /api/v1/namespaces/ns/pods/p1/status ",
		"DELETE /api/v1/namespaces/ns/pods/p1 ",
		"DELETE /apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dn1 ",
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.calls) != len(want) {
		t.Fatalf("calls:\n%s", strings.Join(a.calls, "\n"))
	}
	for i, w := range want {
		if !strings.HasPrefix(a.calls[i], w) {
			t.Errorf("call %d: %s\nwant:    %s", i, a.calls[i], w)
		}
	}
}
