package journal

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/cluster/apiclient"
)

// Unreachable reports whether err says the API server could not be asked
// (no answer, a timeout, or an answer that it cannot serve now), rather
// than an answer such as "not found" or "forbidden", which the journal
// must never paper over.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	return apierrors.IsServiceUnavailable(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err)
}

// object is a configMap or secret.
type object interface {
	GetResourceVersion() string
}

// ReadThrough keeps what the API server returned for a configMap or
// secret, and stands in for it with the journal's copy when the API server
// cannot be asked. got and err are the API's answer.
func ReadThrough[T any, P interface {
	*T
	object
}](j *Journal, kind, namespace, name string, got P, err error) (P, error) {
	key := objectKey(kind, namespace, name)
	if err == nil {
		j.mu.Lock()
		same := j.versions[key] == got.GetResourceVersion() && got.GetResourceVersion() != ""
		j.versions[key] = got.GetResourceVersion()
		j.mu.Unlock()
		if !same {
			j.PutObject(kind, namespace, name, got)
		}
		return got, nil
	}
	if !Unreachable(err) {
		return got, err
	}
	var kept T
	ok, jerr := j.Object(kind, namespace, name, &kept)
	if !ok || jerr != nil {
		return got, err
	}
	klog.V(2).InfoS("API server unreachable: serving the node journal's copy", "kind", kind, "object", namespace+"/"+name, "err", err)
	return &kept, nil
}

// AttachedVolumes is the node's status.volumesAttached, kept as one
// record; its content is its version.
type AttachedVolumes struct {
	Volumes []v1.AttachedVolume `json:"volumes"`
}

// GetResourceVersion is a digest of the list.
func (a *AttachedVolumes) GetResourceVersion() string {
	b, _ := json.Marshal(a.Volumes)
	return fmt.Sprintf("%x", sha256.Sum256(b))
}

// ReadAttachedVolumes keeps the node's attached volumes the API server
// returned, and stands in for them when it cannot be asked.
func ReadAttachedVolumes(j *Journal, got []v1.AttachedVolume, err error) ([]v1.AttachedVolume, error) {
	var list *AttachedVolumes
	if err == nil {
		list = &AttachedVolumes{Volumes: got}
	}
	kept, err := ReadThrough(j, KindAttachedVolumes, "", "node", list, err)
	if err != nil {
		return nil, err
	}
	return kept.Volumes, nil
}

// TokenKey names a token request: its service account, the pod it is
// bound to, its audiences and lifetime.
func TokenKey(namespace, serviceAccount string, req *authenticationv1.TokenRequest) string {
	k := []string{namespace, serviceAccount}
	if ref := req.Spec.BoundObjectRef; ref != nil {
		k = append(k, string(ref.UID))
	}
	k = append(k, strings.Join(req.Spec.Audiences, ","))
	if s := req.Spec.ExpirationSeconds; s != nil {
		k = append(k, fmt.Sprint(*s))
	}
	return strings.Join(k, "/")
}

// TokenCreator creates service account tokens.
type TokenCreator interface {
	CreateToken(ctx context.Context, namespace, serviceAccount string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)
}

// Tokens keeps the tokens the API server issued and, while it cannot be
// asked, hands out the newest one still valid.
type Tokens struct {
	TokenCreator
	Journal *Journal
}

// CreateToken asks the API server, falling back to the journal.
func (t Tokens) CreateToken(ctx context.Context, namespace, serviceAccount string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	key := TokenKey(namespace, serviceAccount, req)
	got, err := t.TokenCreator.CreateToken(ctx, namespace, serviceAccount, req)
	if err == nil {
		r := TokenRecord{Namespace: namespace, ServiceAccount: serviceAccount, Token: got.Status.Token, Expires: got.Status.ExpirationTimestamp.Time}
		if ref := req.Spec.BoundObjectRef; ref != nil && ref.Kind == "Pod" {
			r.Pod = ref.UID
		}
		t.Journal.PutToken(key, r)
		return got, nil
	}
	if !Unreachable(err) {
		return got, err
	}
	r, ok, jerr := t.Journal.Token(key)
	if !ok || jerr != nil || !r.Expires.After(t.Journal.o.Clock.Now()) {
		return got, err
	}
	klog.V(2).InfoS("API server unreachable: serving the node journal's token", "namespace", namespace, "serviceAccount", serviceAccount, "expires", r.Expires, "err", err)
	out := req.DeepCopy()
	out.Status = authenticationv1.TokenRequestStatus{Token: r.Token, ExpirationTimestamp: metav1.NewTime(r.Expires)}
	return out, nil
}

// APIObjects are the objects pods refer to that are watched while they
// do (apiclient.Client).
type APIObjects interface {
	GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error)
	GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)
	Services(namespace string) []*v1.Service
	RegisterPod(pod *v1.Pod)
	UnregisterPod(pod *v1.Pod)
}

// Objects keeps the configMaps and secrets pods refer to in the journal,
// and serves its copies while the API server cannot be asked.
type Objects struct {
	APIObjects
	J *Journal
}

func (o Objects) GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	s, err := o.APIObjects.GetSecret(ctx, namespace, name)
	return ReadThrough(o.J, apiclient.KindSecret, namespace, name, s, err)
}

func (o Objects) GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	c, err := o.APIObjects.GetConfigMap(ctx, namespace, name)
	return ReadThrough(o.J, apiclient.KindConfigMap, namespace, name, c, err)
}
