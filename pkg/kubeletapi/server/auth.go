package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/cluster/kubeclient"
)

// User is who made a request.
type User struct {
	Name   string
	UID    string
	Groups []string
}

// Authenticator tells who made a request: ok false means the request
// carried no credentials this authenticator understands.
type Authenticator interface {
	Authenticate(r *http.Request) (u User, ok bool, err error)
}

// Authorizer decides whether a user may act on the node's subresource.
type Authorizer interface {
	Authorize(ctx context.Context, u User, verb, subresource string) (allowed bool, reason string, err error)
}

// AuthOptions configure the kubelet API's authentication and
// authorization, as the KubeletConfiguration's authentication and
// authorization sections do.
type AuthOptions struct {
	NodeName string
	// Anonymous lets requests without credentials through as
	// system:anonymous.
	Anonymous bool
	// Client, when set, checks bearer tokens with TokenReview (Webhook
	// authentication) and, with AuthorizeWebhook, access with
	// SubjectAccessReview.
	Client           kubeclient.Interface
	TokenWebhook     bool
	AuthorizeWebhook bool
	TokenCacheTTL    time.Duration
	AuthorizedTTL    time.Duration
	UnauthorizedTTL  time.Duration
	Clock            clock.PassiveClock
}

// certAuthenticator takes the user from a verified client certificate:
// the common name is the user, the organisations its groups.
type certAuthenticator struct{}

func (certAuthenticator) Authenticate(r *http.Request) (User, bool, error) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return User{}, false, nil
	}
	cert := r.TLS.VerifiedChains[0][0]
	return User{Name: cert.Subject.CommonName, Groups: cert.Subject.Organization}, true, nil
}

// tokenAuthenticator checks bearer tokens with the API server's
// TokenReview, caching the answers.
type tokenAuthenticator struct {
	client kubeclient.Interface
	cache  answers[tokenResult]
	ttl    time.Duration
}

type tokenResult struct {
	user User
	ok   bool
}

func (a *tokenAuthenticator) Authenticate(r *http.Request) (User, bool, error) {
	token, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !found || token == "" {
		return User{}, false, nil
	}
	if res, hit := a.cache.get(token); hit {
		return res.user, res.ok, nil
	}
	review, err := a.client.AuthenticationV1().TokenReviews().Create(r.Context(),
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return User{}, false, fmt.Errorf("token review: %w", err)
	}
	res := tokenResult{ok: review.Status.Authenticated}
	if res.ok {
		u := review.Status.User
		res.user = User{Name: u.Username, UID: u.UID, Groups: u.Groups}
	}
	a.cache.set(token, res, a.ttl)
	return res.user, res.ok, nil
}

// webhookAuthorizer asks the API server with SubjectAccessReview, caching
// allowed answers longer than denied ones, as the kubelet does.
type webhookAuthorizer struct {
	client            kubeclient.Interface
	nodeName          string
	cache             answers[bool]
	allowTTL, denyTTL time.Duration
}

func (a *webhookAuthorizer) Authorize(ctx context.Context, u User, verb, subresource string) (bool, string, error) {
	key := strings.Join([]string{u.Name, u.UID, strings.Join(u.Groups, ","), verb, subresource}, "|")
	if allowed, hit := a.cache.get(key); hit {
		return allowed, "", nil
	}
	sar, err := a.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: u.Name, UID: u.UID, Groups: u.Groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: verb, Version: "v1", Resource: "nodes", Subresource: subresource, Name: a.nodeName,
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("subject access review: %w", err)
	}
	ttl := a.denyTTL
	if sar.Status.Allowed {
		ttl = a.allowTTL
	}
	a.cache.set(key, sar.Status.Allowed, ttl)
	return sar.Status.Allowed, sar.Status.Reason, nil
}

type alwaysAllow struct{}

func (alwaysAllow) Authorize(context.Context, User, string, string) (bool, string, error) {
	return true, "", nil
}

// denyAll is the webhook authorizer without an API server to ask.
type denyAll struct{}

func (denyAll) Authorize(context.Context, User, string, string) (bool, string, error) {
	return false, "webhook authorization needs an API server", nil
}

// attributes maps a request to the verb and the node subresources it is
// authorized as, as upstream (v1.37, fine-grained authorization GA) maps
// them: the specific subresource first, then what covered it before
// (proxy), so an identity granted either is allowed. A method upstream
// does not name gets no verb, which no policy grants.
func attributes(r *http.Request) (verb string, subresources []string) {
	verb = map[string]string{
		http.MethodGet: "get", http.MethodPost: "create", http.MethodPut: "update",
		http.MethodPatch: "patch", http.MethodDelete: "delete",
	}[r.Method]
	path := r.URL.Path
	for _, fine := range []struct{ prefix, sub string }{
		{"/allocatedPods", "pods"}, {"/pods", "pods"}, {"/healthz", "healthz"},
		{"/configz", "configz"}, {"/runningpods/", "pods"},
	} {
		if isSubpath(path, fine.prefix) {
			subresources = append(subresources, fine.sub)
			break
		}
	}
	for _, coarse := range []struct{ prefix, sub string }{
		{"/stats/", "stats"}, {"/metrics", "metrics"}, {"/logs/", "log"}, {"/checkpoint/", "checkpoint"},
		{"/statusz", "statusz"}, {"/flagz", "configz"},
	} {
		if isSubpath(path, coarse.prefix) {
			return verb, append(subresources, coarse.sub)
		}
	}
	return verb, append(subresources, "proxy")
}

// isSubpath is path itself or below it: /metrics covers /metrics/resource
// but not /metricsfoo.
func isSubpath(path, prefix string) bool {
	prefix = strings.TrimSuffix(prefix, "/")
	return path == prefix || (strings.HasPrefix(path, prefix) && path[len(prefix)] == '/')
}

// WithAuth wraps h with authentication (client certificate, then bearer
// token, then anonymous if allowed: otherwise 401) and authorization
// (403 when denied).
func WithAuth(h http.Handler, o AuthOptions) http.Handler {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	authns := []Authenticator{certAuthenticator{}}
	if o.TokenWebhook && o.Client != nil {
		authns = append(authns, &tokenAuthenticator{client: o.Client, cache: newAnswers[tokenResult](o.Clock), ttl: o.TokenCacheTTL})
	}
	var authz Authorizer = alwaysAllow{}
	if o.AuthorizeWebhook {
		authz = denyAll{}
		if o.Client != nil {
			authz = &webhookAuthorizer{client: o.Client, nodeName: o.NodeName, cache: newAnswers[bool](o.Clock),
				allowTTL: o.AuthorizedTTL, denyTTL: o.UnauthorizedTTL}
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, ok := User{}, false
		for _, a := range authns {
			u, found, err := a.Authenticate(r)
			if err != nil {
				klog.ErrorS(err, "Unable to authenticate the request", "path", r.URL.Path)
				http.Error(w, "Unauthorized", http.StatusUnauthorized)
				return
			}
			if found {
				user, ok = u, true
				break
			}
		}
		if !ok && o.Anonymous {
			user, ok = User{Name: "system:anonymous", Groups: []string{"system:unauthenticated"}}, true
		}
		if !ok {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		verb, subs := attributes(r)
		allowed, reason, err := authorizeAny(r.Context(), authz, user, verb, subs)
		if err != nil {
			klog.ErrorS(err, "Authorization error", "user", user.Name, "verb", verb, "resource", "nodes", "subresources", subs)
			http.Error(w, fmt.Sprintf("Authorization error (user=%s, verb=%s, resource=nodes, subresource(s)=%v)", user.Name, verb, subs), http.StatusInternalServerError)
			return
		}
		if !allowed {
			klog.V(2).InfoS("Forbidden", "user", user.Name, "verb", verb, "subresources", subs, "reason", reason)
			http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=nodes, subresource(s)=%v)", user.Name, verb, subs), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// authorizeAny allows the request if the user may act on any of the
// subresources, asked in order.
func authorizeAny(ctx context.Context, authz Authorizer, u User, verb string, subs []string) (bool, string, error) {
	var reasons []string
	for _, sub := range subs {
		allowed, reason, err := authz.Authorize(ctx, u, verb, sub)
		if err != nil || allowed {
			return allowed, reason, err
		}
		reasons = append(reasons, reason)
	}
	return false, strings.Join(reasons, "; "), nil
}

// answersKept bounds each cache of answers: the least recently used go
// first, so a flood of distinct tokens cannot grow nodelet's memory.
const answersKept = 4096

// answers remembers the API server's answers for a while, on
// apimachinery's LRU cache with expiry.
type answers[V any] struct{ c *cache.LRUExpireCache }

func newAnswers[V any](clk clock.PassiveClock) answers[V] {
	return answers[V]{c: cache.NewLRUExpireCacheWithClock(answersKept, clk)}
}

func (a answers[V]) get(k string) (V, bool) {
	v, ok := a.c.Get(k)
	if !ok {
		var zero V
		return zero, false
	}
	return v.(V), true
}

// set keeps an answer for ttl; with no ttl it is not kept.
func (a answers[V]) set(k string, v V, ttl time.Duration) {
	if ttl > 0 {
		a.c.Add(k, v, ttl)
	}
}
