package images

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// registry is an image service whose private image needs alice's
// password; everything else is public. preloaded images are present
// without the node having pulled them.
type registry struct {
	mu      sync.Mutex
	present map[string]bool
	pulls   []string // "image as user"
}

func (r *registry) PullImage(_ context.Context, in *runtimeapi.PullImageRequest, _ ...grpc.CallOption) (*runtimeapi.PullImageResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	img := in.Image.Image
	r.pulls = append(r.pulls, img+" as "+in.GetAuth().GetUsername())
	if strings.Contains(img, "/private/") && (in.GetAuth().GetUsername() != "alice" || in.GetAuth().GetPassword() != "pw") {
		return nil, errors.New("401 Unauthorized")
	}
	r.present[img] = true
	return &runtimeapi.PullImageResponse{ImageRef: "sha256:" + img}, nil
}

func (r *registry) ImageStatus(_ context.Context, in *runtimeapi.ImageStatusRequest, _ ...grpc.CallOption) (*runtimeapi.ImageStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.present[in.Image.Image] {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	return &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Id: "sha256:" + in.Image.Image}}, nil
}

func (r *registry) pulled() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pulls)
}

func pullSecret(uid, name, user, pass string) v1.Secret {
	return v1.Secret{ObjectMeta: metav1.ObjectMeta{UID: "u-" + k8stypes.UID(uid), Namespace: "ns", Name: name}, Type: v1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{v1.DockerConfigJsonKey: []byte(`{"auths":{"reg.io":{"username":"` + user + `","password":"` + pass + `"}}}`)}}
}

func imagePod(uid string, image string, policy v1.PullPolicy) (*v1.Pod, *v1.Container) {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "ns", UID: "pod-" + k8stypes.UID(uid)}}
	c := &v1.Container{Name: "c", Image: image, ImagePullPolicy: policy}
	p.Spec.Containers = []v1.Container{*c}
	return p, c
}

func verifyingPuller(t *testing.T, reg *registry, root, policy string) *Puller {
	t.Helper()
	pol, err := NewVerifyPolicy(policy, nil)
	if err != nil {
		t.Fatal(err)
	}
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	return NewPuller(PullerOptions{Images: reg, Recorder: record.NewFakeRecorder(100), Clock: clk, Timeout: time.Minute,
		Records: NewPullRecords(root, clk.Now), Verify: pol})
}

// A private image pulled with one pod's secret serves only pods that can
// show that secret (or the same credentials in another secret); a pod
// without pulls again with its own and fails; across a restart too.
func TestPrivateImagesAreNotShared(t *testing.T) {
	const private = "reg.io/private/app:1"
	reg := &registry{present: map[string]bool{}}
	root := t.TempDir()
	p := verifyingPuller(t, reg, root, "")
	alice := pullSecret("1", "alice", "alice", "pw")

	podA, c := imagePod("a", private, v1.PullIfNotPresent)
	if _, msg, err := p.EnsureImage(context.Background(), podA, c, []v1.Secret{alice}, nil); err != nil {
		t.Fatalf("pod a with the secret: %s %v", msg, err)
	}
	// The same secret again: no pull.
	before := reg.pulled()
	podA2, c := imagePod("a2", private, v1.PullIfNotPresent)
	if _, msg, err := p.EnsureImage(context.Background(), podA2, c, []v1.Secret{alice}, nil); err != nil || reg.pulled() != before {
		t.Fatalf("a pod with the same secret: %s %v, %d new pulls", msg, err, reg.pulled()-before)
	}
	// Another secret holding the same credentials: no pull either.
	copyOf := pullSecret("2", "copy", "alice", "pw")
	podC, c := imagePod("c", private, v1.PullIfNotPresent)
	if _, msg, err := p.EnsureImage(context.Background(), podC, c, []v1.Secret{copyOf}, nil); err != nil || reg.pulled() != before {
		t.Fatalf("a pod with the same credentials: %s %v, %d new pulls", msg, err, reg.pulled()-before)
	}

	for name, pp := range map[string]*Puller{"running": p, "restarted": verifyingPuller(t, reg, root, "")} {
		before := reg.pulled()
		podB, c := imagePod("b-"+name, private, v1.PullIfNotPresent)
		_, msg, err := pp.EnsureImage(context.Background(), podB, c, nil, nil)
		if !errors.Is(err, container.ErrImagePull) || reg.pulled() != before+1 {
			t.Errorf("%s: a pod without the secret: %q %v after %d pulls; want ErrImagePull after pulling itself", name, msg, err, reg.pulled()-before)
		}
		podN, c := imagePod("n-"+name, private, v1.PullNever)
		_, msg, err = pp.EnsureImage(context.Background(), podN, c, nil, nil)
		if !errors.Is(err, container.ErrImageNeverPull) || !strings.Contains(msg, "credentials this pod does not have") {
			t.Errorf("%s: pull policy Never without the secret: %q %v", name, msg, err)
		}
	}
}

// An image pulled anonymously serves every pod; a preloaded image is
// verified only under AlwaysVerify; NeverVerify trusts everything.
func TestVerificationPolicies(t *testing.T) {
	const public, preloaded, private = "reg.io/public/app:1", "reg.io/private/preloaded:1", "reg.io/private/app:1"
	for _, tc := range []struct {
		policy                       string
		preloadedPulls, privatePulls bool
	}{
		{NeverVerifyPreloadedImages, false, true},
		{AlwaysVerify, true, true},
		{NeverVerify, false, false},
	} {
		reg := &registry{present: map[string]bool{preloaded: true}}
		p := verifyingPuller(t, reg, t.TempDir(), tc.policy)
		alice := pullSecret("1", "alice", "alice", "pw")
		podA, c := imagePod("a", public, v1.PullIfNotPresent)
		if _, _, err := p.EnsureImage(context.Background(), podA, c, nil, nil); err != nil {
			t.Fatal(err)
		}
		podP, c := imagePod("p", private, v1.PullIfNotPresent)
		if _, _, err := p.EnsureImage(context.Background(), podP, c, []v1.Secret{alice}, nil); err != nil {
			t.Fatal(err)
		}
		before := reg.pulled()
		podB, c := imagePod("b", public, v1.PullIfNotPresent)
		if _, _, err := p.EnsureImage(context.Background(), podB, c, nil, nil); err != nil || reg.pulled() != before {
			t.Errorf("%s: an image pulled anonymously: %v, %d pulls", tc.policy, err, reg.pulled()-before)
		}
		podL, c := imagePod("l", preloaded, v1.PullIfNotPresent)
		_, _, err := p.EnsureImage(context.Background(), podL, c, nil, nil)
		if pulled := reg.pulled() != before; pulled != tc.preloadedPulls {
			t.Errorf("%s: a preloaded image pulled again: %v (%v), want %v", tc.policy, pulled, err, tc.preloadedPulls)
		}
		before = reg.pulled()
		podX, c := imagePod("x", private, v1.PullIfNotPresent)
		_, _, err = p.EnsureImage(context.Background(), podX, c, nil, nil)
		if pulled := reg.pulled() != before; pulled != tc.privatePulls || (tc.privatePulls && err == nil) {
			t.Errorf("%s: a private image without the secret: pulled %v, %v", tc.policy, pulled, err)
		}
	}
}

// The allowlist takes names and prefixes, never tags or stray wildcards.
func TestAllowlist(t *testing.T) {
	p, err := NewVerifyPolicy(NeverVerifyAllowlistedImages, []string{"reg.io/base/app", "mirror.io/*"})
	if err != nil {
		t.Fatal(err)
	}
	for image, verify := range map[string]bool{
		"reg.io/base/app:1": false, "reg.io/base/app@sha256:" + strings.Repeat("0", 64): false,
		"mirror.io/x/y:2": false, "reg.io/base/other:1": true, "mirror.iox/y:1": true,
	} {
		if got := p.mustVerify(image, false); got != verify {
			t.Errorf("%s: verify %v, want %v", image, got, verify)
		}
	}
	for _, bad := range []string{"reg.io/app:1", "reg.io/*/app", "*", " reg.io/app"} {
		if _, err := NewVerifyPolicy(NeverVerifyAllowlistedImages, []string{bad}); err == nil {
			t.Errorf("allowlist %q accepted", bad)
		}
	}
	if _, err := NewVerifyPolicy("Sometimes", nil); err == nil {
		t.Error("an unknown policy accepted")
	}
	if _, err := NewVerifyPolicy(AlwaysVerify, []string{"reg.io/app"}); err == nil {
		t.Error("an allowlist with another policy accepted")
	}
}
