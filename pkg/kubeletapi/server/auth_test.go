package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/kubeclienttest"
)

// reviews is an API server that knows one token and lets its user read
// the node's logs (nodes/log) only; it counts the reviews it was asked for.
type reviews struct {
	mu             sync.Mutex
	tokens, access int
}

func (rv *reviews) client() *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "tokenreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
		rv.mu.Lock()
		rv.tokens++
		rv.mu.Unlock()
		tr := a.(clienttesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		if tr.Spec.Token == "good" {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "alice", Groups: []string{"devs"}}}
		}
		return true, tr, nil
	})
	c.PrependReactor("create", "subjectaccessreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
		rv.mu.Lock()
		rv.access++
		rv.mu.Unlock()
		sar := a.(clienttesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		ra := sar.Spec.ResourceAttributes
		sar.Status.Allowed = sar.Spec.User == "alice" && ra.Resource == "nodes" && ra.Subresource == "log" && ra.Name == "n1"
		return true, sar, nil
	})
	return c
}

func (rv *reviews) counts() (int, int) {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	return rv.tokens, rv.access
}

// Webhook authentication and authorization: tokens are reviewed, access
// is asked per subresource, and both answers are cached for their TTLs
// (allowed longer than denied), on the injected clock.
func TestWebhookAuthnAndAuthz(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(time.Unix(1000, 0))
	rv := &reviews{}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	h := WithAuth(ok, AuthOptions{NodeName: "n1", Client: kubeclienttest.Wrap(rv.client()), TokenWebhook: true, AuthorizeWebhook: true,
		TokenCacheTTL: time.Minute, AuthorizedTTL: 5 * time.Minute, UnauthorizedTTL: 30 * time.Second, Clock: clk})
	get := func(path, token string) int {
		r := httptest.NewRequest("GET", path, nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/containerLogs/ns/p/c", "", http.StatusUnauthorized},
		{"/containerLogs/ns/p/c", "bad", http.StatusUnauthorized},
		{"/logs/messages", "good", http.StatusOK},
		{"/exec/ns/p/c", "good", http.StatusForbidden},
	} {
		if got := get(tc.path, tc.token); got != tc.want {
			t.Errorf("%s with token %q: %d, want %d", tc.path, tc.token, got, tc.want)
		}
	}
	tokens, access := rv.counts()
	if tokens != 2 || access != 2 {
		t.Fatalf("%d token reviews and %d access reviews, want 2 and 2", tokens, access)
	}
	// Within the TTLs everything is answered from the caches.
	get("/logs/messages", "good")
	get("/exec/ns/p/c", "good")
	if tk, ac := rv.counts(); tk != tokens || ac != access {
		t.Fatalf("cached answers asked again: %d token, %d access reviews", tk, ac)
	}
	// Past the denied TTL only the denial is asked again; past the token
	// TTL the token is reviewed again.
	clk.SetTime(clk.Now().Add(45 * time.Second))
	get("/logs/messages", "good")
	get("/exec/ns/p/c", "good")
	if tk, ac := rv.counts(); tk != tokens || ac != access+1 {
		t.Fatalf("after 45 s: %d token (want %d), %d access (want %d) reviews", tk, tokens, ac, access+1)
	}
	clk.SetTime(clk.Now().Add(30 * time.Second))
	get("/logs/messages", "good")
	if tk, _ := rv.counts(); tk != tokens+1 {
		t.Fatalf("after 75 s: %d token reviews, want %d", tk, tokens+1)
	}
}

// The answer caches are bounded: the least recently used answers go.
func TestAnswersAreBounded(t *testing.T) {
	a := newAnswers[int](testingclock.NewFakePassiveClock(time.Unix(0, 0)))
	for i := 0; i <= answersKept; i++ {
		a.set(fmt.Sprintf("k%d", i), i, time.Hour)
	}
	if _, ok := a.get("k0"); ok {
		t.Error("the oldest answer was kept beyond the bound")
	}
	if v, ok := a.get(fmt.Sprintf("k%d", answersKept)); !ok || v != answersKept {
		t.Errorf("the newest answer: %v %v", v, ok)
	}
	a.set("none", 1, 0)
	if _, ok := a.get("none"); ok {
		t.Error("an answer without a TTL was kept")
	}
}

// Each path is authorized as upstream v1.37 authorizes it: the specific
// subresource first, then the one that covered it before, and an identity
// granted either gets in.
func TestFineGrainedAttributes(t *testing.T) {
	for _, tc := range []struct {
		method, path, verb string
		subs               []string
	}{
		{"GET", "/pods", "get", []string{"pods", "proxy"}},
		{"GET", "/pods/", "get", []string{"pods", "proxy"}},
		{"GET", "/podsx", "get", []string{"proxy"}},
		{"GET", "/runningpods/", "get", []string{"pods", "proxy"}},
		{"GET", "/allocatedPods", "get", []string{"pods", "proxy"}},
		{"GET", "/healthz", "get", []string{"healthz", "proxy"}},
		{"GET", "/healthz/syncloop", "get", []string{"healthz", "proxy"}},
		{"GET", "/configz", "get", []string{"configz", "proxy"}},
		{"GET", "/flagz", "get", []string{"configz"}},
		{"GET", "/statusz", "get", []string{"statusz"}},
		{"GET", "/metrics", "get", []string{"metrics"}},
		{"GET", "/metrics/resource", "get", []string{"metrics"}},
		{"GET", "/metricsx", "get", []string{"proxy"}},
		{"GET", "/stats/summary", "get", []string{"stats"}},
		{"GET", "/logs/messages", "get", []string{"log"}},
		{"POST", "/checkpoint/ns/p/c", "create", []string{"checkpoint"}},
		{"GET", "/containerLogs/ns/p/c", "get", []string{"proxy"}},
		{"POST", "/exec/ns/p/c", "create", []string{"proxy"}},
		{"GET", "/spec/", "get", []string{"proxy"}},
		{"HEAD", "/pods", "", []string{"pods", "proxy"}},
	} {
		verb, subs := attributes(httptest.NewRequest(tc.method, tc.path, nil))
		if verb != tc.verb || fmt.Sprint(subs) != fmt.Sprint(tc.subs) {
			t.Errorf("%s %s: %q %v, want %q %v", tc.method, tc.path, verb, subs, tc.verb, tc.subs)
		}
	}
	granted := func(sub string) http.Handler {
		c := fake.NewClientset()
		c.PrependReactor("create", "subjectaccessreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
			sar := a.(clienttesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
			sar.Status.Allowed = sar.Spec.ResourceAttributes.Subresource == sub
			return true, sar, nil
		})
		ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
		return WithAuth(ok, AuthOptions{NodeName: "n1", Client: kubeclienttest.Wrap(c), AuthorizeWebhook: true, Anonymous: true})
	}
	for _, tc := range []struct {
		grant, path string
		want        int
	}{
		{"pods", "/pods", http.StatusOK},
		{"proxy", "/pods", http.StatusOK},
		{"pods", "/exec/ns/p/c", http.StatusForbidden},
		{"healthz", "/healthz", http.StatusOK},
		{"healthz", "/pods", http.StatusForbidden},
		{"metrics", "/metrics/resource", http.StatusOK},
		{"proxy", "/metrics/resource", http.StatusForbidden},
		{"configz", "/configz", http.StatusOK},
	} {
		w := httptest.NewRecorder()
		granted(tc.grant).ServeHTTP(w, httptest.NewRequest("GET", tc.path, nil))
		if w.Code != tc.want {
			t.Errorf("granted nodes/%s, GET %s: %d, want %d", tc.grant, tc.path, w.Code, tc.want)
		}
	}
}
