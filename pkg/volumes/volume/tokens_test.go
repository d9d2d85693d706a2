package volume

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/volumetest"
)

// getToken asks the cache for a token, stepping the fake clock through
// whatever waits it makes, and returns its answer.
func getToken(t *testing.T, clk *testingclock.FakeClock, c *tokenCache, api Tokens) (string, error) {
	t.Helper()
	type answer struct {
		token string
		err   error
	}
	done := make(chan answer, 1)
	go func() {
		tok, err := c.get(context.Background(), api, testPod(), &v1.ServiceAccountTokenProjection{Path: "token"})
		done <- answer{tok, err}
	}()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case a := <-done:
			return a.token, a.err
		case <-deadline:
			t.Fatal("the token request never returned")
		case <-time.After(time.Millisecond): // polling the fake clock's waiters
			if clk.HasWaiters() {
				clk.Step(2 * time.Second)
			}
		}
	}
}

// TestTokenRefusedWhileTheBindingPropagates: a Forbidden or NotFound
// answer (the API server's authorizer has not seen the pod's binding
// yet) is asked again after a short wait, within the same set-up; a
// refusal that lasts, or another error, fails the set-up.
func TestTokenRefusedWhileTheBindingPropagates(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "serviceaccounts/token"}, "sa",
		errors.New(`no relationship found between node "n1" and this object`))
	notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "p")
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))

	api := volumetest.New(clk)
	api.FailTokens(forbidden, notFound)
	tok, err := getToken(t, clk, newTokenCache(clk), api)
	if err != nil || tok != "token-sa-1" {
		t.Fatalf("after two refusals: %q %v", tok, err)
	}

	lasting := volumetest.New(clk)
	for range len(tokenRetries) + 1 {
		lasting.FailTokens(forbidden)
	}
	lasting.FailTokens(errors.New("not asked: the retries are spent"))
	if _, err := getToken(t, clk, newTokenCache(clk), lasting); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "requesting a token for service account ns/sa") {
		t.Fatalf("a lasting refusal: %v", err)
	}

	other := volumetest.New(clk)
	other.FailTokens(apierrors.NewInternalError(errors.New("etcd down")), forbidden)
	if _, err := getToken(t, clk, newTokenCache(clk), other); !apierrors.IsInternalError(err) {
		t.Fatalf("an internal error is not retried here: %v", err)
	}
	if _, err := getToken(t, clk, newTokenCache(clk), other); err != nil {
		t.Fatalf("the next set-up: %v (the forbidden answer left should have been retried)", err)
	}
}

// TestExpiredTokensAreSweptOnceAMinute: tokens of pods long gone are
// dropped when a new token is cached, but at most once a minute, not at
// every new token (a burst of n pods would make n sweeps of n tokens).
func TestExpiredTokensAreSweptOnceAMinute(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	api := volumetest.New(clk)
	c := newTokenCache(clk)
	ten := int64(600)
	ask := func(uid string) {
		t.Helper()
		pod := testPod()
		pod.UID = types.UID(uid)
		if _, err := c.get(context.Background(), api, pod, &v1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &ten}); err != nil {
			t.Fatal(err)
		}
	}
	cached := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.tokens)
	}
	ask("a")                    // swept, a cached; a expires at 600 s
	clk.Step(590 * time.Second) // 590 s
	ask("b")                    // swept: nothing expired
	clk.Step(20 * time.Second)  // 610 s: a has expired
	ask("c")                    // 20 s after the last sweep: none
	if n := cached(); n != 3 {
		t.Fatalf("%d tokens cached after a sweep within the minute, want a, b and c", n)
	}
	clk.Step(40 * time.Second) // 650 s: a minute since the last sweep
	ask("d")
	if n := cached(); n != 3 {
		t.Fatalf("%d tokens cached, want b, c and d (a expired)", n)
	}
	if api.Tokens() != 4 {
		t.Fatalf("%d tokens issued, want 4", api.Tokens())
	}
}

// TestATornDownPodsTokensAreForgotten: once a pod's volumes are torn
// down its tokens leave the cache (a node running many short pods would
// otherwise hold each one's for its hour), and other pods' stay.
func TestATornDownPodsTokensAreForgotten(t *testing.T) {
	f := newFixture(t)
	gone, staying := testPod(), testPod()
	staying.UID = "u2"
	for _, pod := range []*v1.Pod{gone, staying} {
		if _, err := f.m.tokens.get(context.Background(), f.api, pod, &v1.ServiceAccountTokenProjection{Path: "token"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.m.WaitForUnmount(context.Background(), gone); err != nil {
		t.Fatal(err)
	}
	f.m.tokens.mu.Lock()
	_, goneHeld := f.m.tokens.tokens[gone.UID]
	_, stayingHeld := f.m.tokens.tokens[staying.UID]
	f.m.tokens.mu.Unlock()
	if goneHeld || !stayingHeld {
		t.Fatalf("after tearing down %s: its tokens held %v, %s's %v", gone.UID, goneHeld, staying.UID, stayingHeld)
	}
	// The one still cached is served from the cache; the forgotten pod
	// (were it set up again) asks anew.
	for _, pod := range []*v1.Pod{staying, gone} {
		if _, err := f.m.tokens.get(context.Background(), f.api, pod, &v1.ServiceAccountTokenProjection{Path: "token"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.api.Tokens(); n != 3 {
		t.Fatalf("%d tokens issued, want 3 (u1, u2, then u1 again)", n)
	}
}
