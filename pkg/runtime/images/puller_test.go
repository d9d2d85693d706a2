package images

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/fakecri"
	"github.com/nodelet/nodelet/internal/testutil"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

var t0 = time.Unix(1000, 0)

func TestParseDockerConfig(t *testing.T) {
	auth := base64.StdEncoding.EncodeToString([]byte("alice:s3cret"))
	for name, data := range map[string]string{
		"config.json": fmt.Sprintf(`{"auths": {"registry.example.com": {"auth": %q}}}`, auth),
		".dockercfg":  fmt.Sprintf(`{"registry.example.com": {"auth": %q, "email": "a@example.com"}}`, auth),
		"plain":       `{"auths": {"registry.example.com": {"username": "alice", "password": "s3cret"}}}`,
	} {
		c, err := parseDockerConfig([]byte(data))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if e := c["registry.example.com"]; e.Username != "alice" || e.Password != "s3cret" {
			t.Fatalf("%s: %+v", name, e)
		}
	}
	for _, bad := range []string{"nope", `{"auths": {"r": {"auth": "!!!"}}}`, `{"r": {"auth": "bm9jb2xvbg=="}}`} {
		if _, err := parseDockerConfig([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestKeyringMatching(t *testing.T) {
	creds := credentials{
		"registry.example.com":             {Username: "host"},
		"registry.example.com/team":        {Username: "team"},
		"https://index.docker.io/v1/":      {Username: "hub"},
		"*.corp.example.com":               {Username: "glob"},
		"localhost:5000":                   {Username: "local"},
		"https://registry.example.com/v2/": {Username: "v2-path"},
	}
	for image, want := range map[string]string{
		"registry.example.com/app:1":        "host",
		"registry.example.com/team/app:1":   "team,host",
		"registry.example.com/teamster/app": "host",
		"busybox:1.36":                      "hub",
		"docker.io/library/busybox":         "hub",
		"someone/app":                       "hub",
		"eu.corp.example.com/x/y@sha256:" + strings.Repeat("0a", 32): "glob",
		"Not/A/Reference":        "",
		"a.b.corp.example.com/x": "",
		"localhost:5000/app":     "local",
		"localhost:5001/app":     "",
		"other.example.com/app":  "",
	} {
		var got []string
		for _, a := range authConfigs(image, []secretCreds{{creds: creds}}, nil) {
			got = append(got, a.auth.Username)
		}
		if strings.Join(got, ",") != want {
			t.Errorf("%s: %v, want %s", image, got, want)
		}
	}
	// The pod's pull secrets come before the node's own credentials.
	node := credentials{"registry.example.com": {Username: "node"}}
	got := authConfigs("registry.example.com/app", []secretCreds{{creds: credentials{"registry.example.com": {Username: "pod"}},
		secret: kubeletv1beta1.ImagePullSecret{Name: "s"}}}, []credentials{node})
	if len(got) != 2 || got[0].auth.Username != "pod" || got[1].auth.Username != "node" {
		t.Fatalf("order %v", got)
	}
	// Each says whose it is, for the record of who pulled the image.
	if got[0].by.secret == nil || got[0].by.secret.Name != "s" || got[0].by.node || !got[1].by.node {
		t.Errorf("origins %+v %+v", got[0].by, got[1].by)
	}
}

func TestSecretCredentials(t *testing.T) {
	secrets := []v1.Secret{
		{Type: v1.SecretTypeDockerConfigJson, Data: map[string][]byte{v1.DockerConfigJsonKey: []byte(`{"auths": {"r.io": {"username": "a", "password": "b"}}}`)}},
		{Type: v1.SecretTypeDockercfg, Data: map[string][]byte{v1.DockerConfigKey: []byte(`{"s.io": {"username": "c", "password": "d"}}`)}},
		{Type: v1.SecretTypeOpaque, Data: map[string][]byte{"x": []byte("y")}},
		{Type: v1.SecretTypeDockerConfigJson, Data: map[string][]byte{v1.DockerConfigJsonKey: []byte("broken")}},
	}
	c := secretCredentials(secrets)
	if len(c) != 2 || c[0].creds["r.io"].Username != "a" || c[1].creds["s.io"].Password != "d" {
		t.Fatalf("%v", c)
	}
}

func TestNodeCredentialsAreReadOnEveryPull(t *testing.T) {
	dir := t.TempDir()
	if c := nodeCredentials(dir); len(c) != 0 {
		t.Fatal("credentials without a file")
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"auths": {"r.io": {"username": "u", "password": "p"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if c := nodeCredentials(dir); len(c) != 1 || c[0]["r.io"].Username != "u" {
		t.Fatalf("%v", c)
	}
}

// blockingImages holds every pull until released, counting how many run at once.
type blockingImages struct {
	ImageService
	release chan struct{}
	running atomic.Int32
	peak    atomic.Int32
}

func (b *blockingImages) PullImage(ctx context.Context, in *runtimeapi.PullImageRequest, _ ...grpc.CallOption) (*runtimeapi.PullImageResponse, error) {
	n := b.running.Add(1)
	for {
		p := b.peak.Load()
		if n <= p || b.peak.CompareAndSwap(p, n) {
			break
		}
	}
	<-b.release
	b.running.Add(-1)
	return &runtimeapi.PullImageResponse{ImageRef: "sha256:" + in.Image.Image}, nil
}

func TestParallelPullsAreCapped(t *testing.T) {
	for _, tc := range []struct{ max, want int32 }{{1, 1}, {2, 2}, {0, 4}} {
		imgs := &blockingImages{release: make(chan struct{})}
		p := NewPuller(PullerOptions{Images: imgs, Recorder: record.NewFakeRecorder(100), Clock: testingclock.NewFakeClock(t0), Timeout: time.Minute, MaxParallel: int(tc.max)})
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				if _, _, err := p.pull(context.Background(), fmt.Sprintf("img%d", i), nil, nil); err != nil {
					t.Error(err)
				}
			}(i)
		}
		testutil.WaitFor(t, fmt.Sprintf("%d pulls at once", tc.want), func() bool { return imgs.running.Load() >= tc.want })
		for i := 0; i < 4; i++ {
			imgs.release <- struct{}{}
		}
		wg.Wait()
		if got := imgs.peak.Load(); got != tc.want {
			t.Errorf("max %d: %d pulls at once, want %d", tc.max, got, tc.want)
		}
	}
}

// With pulls serialized, a pull that runs past the request timeout lets
// the next one start: one stuck pull holds up only its own pods.
func TestStuckPullGivesItsSlotUp(t *testing.T) {
	imgs := &blockingImages{release: make(chan struct{})}
	clk := testingclock.NewFakeClock(t0)
	p := NewPuller(PullerOptions{Images: imgs, Recorder: record.NewFakeRecorder(100), Clock: clk, Timeout: time.Minute, MaxParallel: 1})
	var wg sync.WaitGroup
	for _, img := range []string{"stuck", "next"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := p.pull(context.Background(), img, nil, nil); err != nil {
				t.Error(err)
			}
		}()
	}
	testutil.WaitFor(t, "the first pull to start", func() bool { return imgs.running.Load() == 1 && clk.HasWaiters() })
	clk.Step(59 * time.Second)
	// The slot's timer is still armed (the fake clock holds its waiter),
	// so nothing can have given the slot up yet: the check below is made
	// while the code under test is still waiting, not before it ran.
	if !clk.HasWaiters() {
		t.Fatal("the stuck pull's timer fired before the timeout")
	}
	if imgs.running.Load() != 1 {
		t.Fatal("a second pull started before the timeout")
	}
	clk.Step(time.Second)
	testutil.WaitFor(t, "the next pull to start", func() bool { return imgs.running.Load() == 2 })
	imgs.release <- struct{}{}
	imgs.release <- struct{}{}
	wg.Wait()
	// Both slots were given back once: a third pull runs.
	go func() { imgs.release <- struct{}{} }()
	if _, _, err := p.pull(context.Background(), "third", nil, nil); err != nil {
		t.Fatal(err)
	}
}

func TestSamePullIsShared(t *testing.T) {
	imgs := &blockingImages{release: make(chan struct{})}
	p := NewPuller(PullerOptions{Images: imgs, Recorder: record.NewFakeRecorder(100), Clock: testingclock.NewFakeClock(t0), Timeout: time.Minute})
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := p.pull(context.Background(), "same", nil, nil); err != nil {
				t.Error(err)
			}
		}()
	}
	// Release the pull only once the two others joined it: a goroutine
	// arriving after it ended would rightly start a pull of its own.
	joined := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		c := p.inflight[pullKey("same", nil)]
		return c != nil && c.sharers == 2
	}
	testutil.WaitFor(t, "the three pulls to meet", joined)
	imgs.release <- struct{}{}
	wg.Wait()
	if got := imgs.peak.Load(); got != 1 {
		t.Fatalf("%d pulls of one image", got)
	}
}

type pullerFixture struct {
	p     *Puller
	rt    *fakecri.Runtime
	clock *testingclock.FakeClock
}

func newPullerFixture() *pullerFixture {
	clk := testingclock.NewFakeClock(t0)
	rt := fakecri.New(clk)
	return &pullerFixture{p: NewPuller(PullerOptions{Images: rt, Recorder: record.NewFakeRecorder(100), Clock: clk, Timeout: time.Minute}), rt: rt, clock: clk}
}

func testPod() *v1.Pod {
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "img"}}}}
	pod.Name, pod.Namespace, pod.UID = "a", "ns", "a"
	return pod
}

// pulls lists the runtime's PullImage calls.
func pulls(rt *fakecri.Runtime) []string {
	var out []string
	for _, c := range rt.Calls() {
		if strings.HasPrefix(c, "PullImage") {
			out = append(out, c)
		}
	}
	return out
}

func TestImagePullPolicies(t *testing.T) {
	ctx := context.Background()
	pod := testPod()
	c := &pod.Spec.Containers[0]
	for _, tc := range []struct {
		image   string
		policy  v1.PullPolicy
		present bool
		pulls   int
		err     error
	}{
		{"img:1", v1.PullIfNotPresent, true, 0, nil},
		{"img:1", v1.PullIfNotPresent, false, 1, nil},
		{"img:1", v1.PullAlways, true, 1, nil},
		{"img:1", v1.PullNever, false, 0, container.ErrImageNeverPull},
		{"img:1", v1.PullNever, true, 0, nil},
		{"img", "", true, 1, nil}, // untagged defaults to Always
		{"img:2", "", true, 0, nil},
		{"bad image", "", false, 0, container.ErrInvalidImageName},
	} {
		f := newPullerFixture()
		if tc.present {
			if _, err := f.rt.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: tc.image}}); err != nil {
				t.Fatal(err)
			}
		}
		f.rt.ResetCalls()
		c.Image, c.ImagePullPolicy = tc.image, tc.policy
		_, _, err := f.p.EnsureImage(ctx, pod, c, nil, nil)
		if !errors.Is(err, tc.err) && err != tc.err {
			t.Errorf("%s %s present=%v: err %v, want %v", tc.image, tc.policy, tc.present, err, tc.err)
		}
		if got := len(pulls(f.rt)); got != tc.pulls {
			t.Errorf("%s %s present=%v: %d pulls, want %d", tc.image, tc.policy, tc.present, got, tc.pulls)
		}
	}
}

func TestImagePullBackOff(t *testing.T) {
	ctx := context.Background()
	f := newPullerFixture()
	pod := testPod()
	c := &pod.Spec.Containers[0]
	c.Image, c.ImagePullPolicy = "missing:1", v1.PullIfNotPresent
	f.rt.FailNext("PullImage", errors.New("not found"))
	if _, _, err := f.p.EnsureImage(ctx, pod, c, nil, nil); !errors.Is(err, container.ErrImagePull) {
		t.Fatalf("first: %v", err)
	}
	if _, _, err := f.p.EnsureImage(ctx, pod, c, nil, nil); !errors.Is(err, container.ErrImagePullBackOff) {
		t.Fatalf("second: %v", err)
	}
	f.clock.Step(4 * time.Second)
	if left := f.p.BackOffLeft(pod.UID, c.Image); left != 6*time.Second {
		t.Fatalf("back-off left %v, want 6s", left)
	}

	// Another pod pulling the same image is not held back by the first
	// pod's back-off: it pulls at once.
	other := testPod()
	other.Name, other.UID = "b", "b"
	oc := &other.Spec.Containers[0]
	oc.Image, oc.ImagePullPolicy = c.Image, c.ImagePullPolicy
	f.rt.ResetCalls()
	if _, _, err := f.p.EnsureImage(ctx, other, oc, nil, nil); err != nil {
		t.Fatalf("another pod: %v, want a pull of its own", err)
	}
	if n := len(pulls(f.rt)); n != 1 {
		t.Fatalf("another pod made %d pulls, want 1", n)
	}
	if left := f.p.BackOffLeft(other.UID, c.Image); left != 0 {
		t.Fatalf("another pod's back-off %v", left)
	}

	f.clock.Step(7 * time.Second)
	if _, _, err := f.p.EnsureImage(ctx, pod, c, nil, nil); err != nil {
		t.Fatalf("after the back-off: %v", err)
	}
	// Back-offs that ended long ago are forgotten.
	f.clock.Step(2*imageBackOffMax + time.Second)
	f.p.ForgetBackOffs()
	if n := len(f.p.failed); n != 0 {
		t.Fatalf("%d back-offs kept", n)
	}
}

// What the runtime said of a present image is kept by its ID: asking for
// the image again (its size for the timeline, its user for runAsNonRoot)
// asks the runtime nothing more. An image not asked about before is read.
func TestImageIsReadOncePerID(t *testing.T) {
	ctx := context.Background()
	f := newPullerFixture()
	if _, err := f.rt.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "img:1"}}); err != nil {
		t.Fatal(err)
	}
	pod := testPod()
	pod.Spec.Containers[0].Image = "img:1"
	f.rt.ResetCalls()
	ref, _, err := f.p.EnsureImage(ctx, pod, &pod.Spec.Containers[0], nil, nil)
	if err != nil || ref == "" {
		t.Fatalf("ref %q, err %v", ref, err)
	}
	for i := 0; i < 2; i++ {
		if img := f.p.Image(ctx, ref); img == nil || img.Id != ref {
			t.Fatalf("image %v for %s", img, ref)
		}
	}
	statuses := func() (n int) {
		for _, c := range f.rt.Calls() {
			if strings.HasPrefix(c, "ImageStatus") {
				n++
			}
		}
		return n
	}
	if n := statuses(); n != 1 {
		t.Fatalf("%d ImageStatus calls for one image, want 1: %v", n, f.rt.Calls())
	}
	if img := f.p.Image(ctx, "sha256:other"); img != nil || statuses() != 2 {
		t.Fatalf("an unknown image: %v, calls %v", img, f.rt.Calls())
	}
}
