package volume

import (
	"context"
	"fmt"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// defaultTokenExpiration is a projected token's lifetime when the pod
// does not say (upstream's default, 1 h plus 7 s).
const defaultTokenExpiration = 3607

// tokenCache keeps the service account tokens issued for pods, and asks
// for a new one once 80% of a token's lifetime has passed (as upstream's
// token manager does). Volumes are rewritten at every pod sync, so a
// running pod's token file is renewed before it expires.
type tokenCache struct {
	clock clock.Clock

	mu sync.Mutex
	// tokens are by pod, then by audience and lifetime: a pod's go when
	// its volumes are torn down (forget).
	tokens map[types.UID]map[string]cachedToken
	// swept is when expired tokens were last dropped.
	swept time.Time
}

// sweepEvery spaces the sweeps of expired tokens: each looks at every
// token, and a burst of n pods asking for theirs would otherwise make n
// sweeps of up to n tokens. Tokens live 10 minutes at least.
const sweepEvery = time.Minute

type cachedToken struct {
	token   string
	refresh time.Time
	expires time.Time
}

// tokenRetries are the waits before asking again when the API server
// refuses a token as if the pod were not bound here: a pod just bound to
// this node can reach nodelet's watch before the API server's node
// authorizer and NodeRestriction (which follow informers of their own)
// know the binding, so its first request is Forbidden, or finds no pod,
// for a moment. Upstream's volume reconciler retries after 500 ms; these
// waits stay within the sync (3.1 s in all), so such a pod is not held
// back by the pod worker's 10 s back-off. A refusal that lasts goes to
// the back-off as any failed set-up.
var tokenRetries = []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
	800 * time.Millisecond, 1600 * time.Millisecond}

func newTokenCache(clk clock.Clock) *tokenCache {
	return &tokenCache{clock: clk, tokens: map[types.UID]map[string]cachedToken{}}
}

// forget drops a pod's tokens once its volumes are gone: nothing reads
// them again, and a node that runs many short pods would otherwise hold
// each one's until it expires (an hour by default).
func (c *tokenCache) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.tokens, uid)
}

func (c *tokenCache) get(ctx context.Context, api Tokens, pod *v1.Pod, src *v1.ServiceAccountTokenProjection) (string, error) {
	seconds := int64(defaultTokenExpiration)
	if src.ExpirationSeconds != nil {
		seconds = *src.ExpirationSeconds
	}
	key := fmt.Sprintf("%s/%d", src.Audience, seconds)
	now := c.clock.Now()
	c.mu.Lock()
	t, ok := c.tokens[pod.UID][key]
	c.mu.Unlock()
	if ok && now.Before(t.refresh) {
		return t.token, nil
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &seconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
	}}
	if src.Audience != "" {
		req.Spec.Audiences = []string{src.Audience}
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	resp, err := api.CreateToken(ctx, pod.Namespace, sa, req)
	for _, wait := range tokenRetries {
		if err == nil || !(apierrors.IsForbidden(err) || apierrors.IsNotFound(err)) {
			break
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-c.clock.After(wait):
		}
		resp, err = api.CreateToken(ctx, pod.Namespace, sa, req)
	}
	if err != nil {
		return "", fmt.Errorf("requesting a token for service account %s/%s: %w", pod.Namespace, sa, err)
	}
	expires := resp.Status.ExpirationTimestamp.Time
	t = cachedToken{token: resp.Status.Token, expires: expires, refresh: now.Add(expires.Sub(now) * 8 / 10)}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Every end of a pod tears its volumes down (forget), but a teardown
	// can fail and be retried for long: its pod's tokens go here once
	// expired.
	if now.Sub(c.swept) >= sweepEvery {
		c.swept = now
		for uid, pod := range c.tokens {
			for k, old := range pod {
				if now.After(old.expires) {
					delete(pod, k)
				}
			}
			if len(pod) == 0 {
				delete(c.tokens, uid)
			}
		}
	}
	if c.tokens[pod.UID] == nil {
		c.tokens[pod.UID] = map[string]cachedToken{}
	}
	c.tokens[pod.UID][key] = t
	return t.token, nil
}
