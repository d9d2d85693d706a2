package kuberuntime

import (
	"context"
	"encoding/base64"
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
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"
)

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
		"registry.example.com/app:1":          "host",
		"registry.example.com/team/app:1":     "team,host",
		"registry.example.com/teamster/app":   "host",
		"busybox:1.36":                        "hub",
		"docker.io/library/busybox":           "hub",
		"someone/app":                         "hub",
		"eu.corp.example.com/x/y@sha256:0abc": "glob",
		"a.b.corp.example.com/x":              "",
		"localhost:5000/app":                  "local",
		"localhost:5001/app":                  "",
		"other.example.com/app":               "",
	} {
		var got []string
		for _, a := range authConfigs(image, []credentials{creds}, nil) {
			got = append(got, a.Username)
		}
		if strings.Join(got, ",") != want {
			t.Errorf("%s: %v, want %s", image, got, want)
		}
	}
	// The pod's pull secrets come before the node's own credentials.
	node := credentials{"registry.example.com": {Username: "node"}}
	got := authConfigs("registry.example.com/app", []credentials{{"registry.example.com": {Username: "pod"}}}, []credentials{node})
	if len(got) != 2 || got[0].Username != "pod" || got[1].Username != "node" {
		t.Fatalf("order %v", got)
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
	if len(c) != 2 || c[0]["r.io"].Username != "a" || c[1]["s.io"].Password != "d" {
		t.Fatalf("%v", c)
	}
}

func TestNodeCredentialsAreReadOnEveryPull(t *testing.T) {
	dir := t.TempDir()
	if c := nodeCredentials(dir); len(c) != 0 {
		t.Fatal("credentials without a file")
	}
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"auths": {"r.io": {"username": "u", "password": "p"}}}`), 0o600)
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
		p := newImagePuller(imgs, record.NewFakeRecorder(100), testingclock.NewFakeClock(t0), time.Minute, int(tc.max))
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				p.pull(context.Background(), fmt.Sprintf("img%d", i), nil, nil)
			}(i)
		}
		deadline := time.Now().Add(5 * time.Second)
		for imgs.running.Load() < tc.want && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond) // polling interval
		}
		for i := 0; i < 4; i++ {
			imgs.release <- struct{}{}
		}
		wg.Wait()
		if got := imgs.peak.Load(); got != tc.want {
			t.Errorf("max %d: %d pulls at once, want %d", tc.max, got, tc.want)
		}
	}
}

func TestSamePullIsShared(t *testing.T) {
	imgs := &blockingImages{release: make(chan struct{})}
	p := newImagePuller(imgs, record.NewFakeRecorder(100), testingclock.NewFakeClock(t0), time.Minute, 0)
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); p.pull(context.Background(), "same", nil, nil) }()
	}
	// Release the pull only once the two others joined it: a goroutine
	// arriving after it ended would rightly start a pull of its own.
	joined := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		c := p.inflight["same"]
		return c != nil && c.sharers == 2
	}
	deadline := time.Now().Add(5 * time.Second)
	for !joined() {
		if time.Now().After(deadline) {
			t.Fatal("the three pulls never met")
		}
		time.Sleep(time.Millisecond) // polling interval
	}
	imgs.release <- struct{}{}
	wg.Wait()
	if got := imgs.peak.Load(); got != 1 {
		t.Fatalf("%d pulls of one image", got)
	}
}

func TestImageGC(t *testing.T) {
	f := newFixture(t, "unused:1", "old:1", "registry.k8s.io/pause:3.10")
	f.rt.SetImageFs(t.TempDir())
	pod := newPod(v1.RestartPolicyAlways, "a").pod // uses "img"
	f.sync(t, pod)
	ctx := context.Background()
	policy := ImageGCPolicy{HighThresholdPercent: 0, LowThresholdPercent: 0, MinAge: time.Minute, Pinned: []string{"registry.k8s.io/pause:3.10"}}
	// Too young to go.
	f.m.ImageGC(ctx, policy)
	if got := strings.Join(f.rt.Images(), ","); got != "img,old:1,registry.k8s.io/pause:3.10,unused:1" {
		t.Fatalf("removed young images: %s", got)
	}
	f.clock.Step(2 * time.Minute)
	f.m.ImageGC(ctx, policy)
	if got := strings.Join(f.rt.Images(), ","); got != "img,registry.k8s.io/pause:3.10" {
		t.Fatalf("after GC: %s (want the image in use and the pinned one)", got)
	}
	// Below the high threshold nothing is removed.
	f2 := newFixture(t, "unused:1")
	f2.rt.SetImageFs(t.TempDir())
	f2.m.ImageGC(ctx, ImageGCPolicy{HighThresholdPercent: 100, LowThresholdPercent: 90})
	if got := strings.Join(f2.rt.Images(), ","); got != "img,unused:1" {
		t.Fatalf("removed images below the threshold: %s", got)
	}
}

func TestOOMScoreAdj(t *testing.T) {
	mem := func(req, lim string) v1.ResourceRequirements {
		r := v1.ResourceRequirements{Requests: v1.ResourceList{}, Limits: v1.ResourceList{}}
		if req != "" {
			r.Requests[v1.ResourceMemory] = resource.MustParse(req)
		}
		if lim != "" {
			r.Limits[v1.ResourceMemory] = resource.MustParse(lim)
			r.Limits[v1.ResourceCPU] = resource.MustParse("1")
			r.Requests[v1.ResourceCPU] = resource.MustParse("1")
		}
		return r
	}
	capacity := int64(10 << 30)
	for _, tc := range []struct {
		res  v1.ResourceRequirements
		want int64
	}{
		{mem("1Gi", "1Gi"), -997}, // Guaranteed
		{v1.ResourceRequirements{}, 1000},
		{mem("5Gi", ""), 500},
		{mem("10Gi", ""), 3},
		{mem("1", ""), 999},
	} {
		p := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: tc.res}}}}
		if got := oomScoreAdj(p, &p.Spec.Containers[0], capacity); got != tc.want {
			t.Errorf("%+v: %d, want %d", tc.res, got, tc.want)
		}
	}
}

func TestRunAsNonRoot(t *testing.T) {
	yes := true
	zero, uid := int64(0), int64(1000)
	pod := &v1.Pod{Spec: v1.PodSpec{SecurityContext: &v1.PodSecurityContext{RunAsNonRoot: &yes}}}
	c := &v1.Container{Name: "c"}
	sc := func(u *int64) *runtimeapi.LinuxContainerSecurityContext {
		s := &runtimeapi.LinuxContainerSecurityContext{}
		if u != nil {
			s.RunAsUser = &runtimeapi.Int64Value{Value: *u}
		}
		return s
	}
	img := func(uid *int64, name string) *runtimeapi.Image {
		i := &runtimeapi.Image{Username: name}
		if uid != nil {
			i.Uid = &runtimeapi.Int64Value{Value: *uid}
		}
		return i
	}
	for _, tc := range []struct {
		sc   *runtimeapi.LinuxContainerSecurityContext
		img  *runtimeapi.Image
		want string
	}{
		{sc(&uid), img(&zero, ""), ""},
		{sc(&zero), img(&uid, ""), "runAsUser breaks non-root policy"},
		{sc(nil), img(&zero, ""), "image will run as root"},
		{sc(nil), img(nil, ""), "image will run as root"},
		{sc(nil), img(nil, "nobody"), "non-numeric user (nobody)"},
		{sc(nil), img(&uid, ""), ""},
	} {
		err := verifyRunAsNonRoot(pod, c, tc.sc, tc.img)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("runAsUser %v image %+v: %v, want %q", tc.sc.RunAsUser, tc.img, err, tc.want)
		}
	}
	// Without runAsNonRoot, root is fine.
	if err := verifyRunAsNonRoot(&v1.Pod{}, c, sc(&zero), img(&zero, "")); err != nil {
		t.Fatal(err)
	}
}

func TestLinuxResources(t *testing.T) {
	c := &v1.Container{Resources: v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("1500m"), v1.ResourceMemory: resource.MustParse("128Mi")},
	}}
	r := linuxResources(c)
	if r.CpuShares != 256 || r.CpuQuota != 150000 || r.CpuPeriod != 100000 || r.MemoryLimitInBytes != 128<<20 {
		t.Fatalf("%+v", r)
	}
	if r := linuxResources(&v1.Container{}); r.CpuShares != 2 || r.CpuQuota != 0 || r.MemoryLimitInBytes != 0 {
		t.Fatalf("best effort %+v", r)
	}
	limitOnly := &v1.Container{Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2")}}}
	if r := linuxResources(limitOnly); r.CpuShares != 2048 {
		t.Fatalf("a limit without a request: shares %d", r.CpuShares)
	}
}

func TestSecurityContextTranslation(t *testing.T) {
	u, g, cu, fs := int64(1000), int64(2000), int64(3000), int64(4000)
	no, yes := false, true
	pod := &v1.Pod{Spec: v1.PodSpec{SecurityContext: &v1.PodSecurityContext{
		RunAsUser: &u, RunAsGroup: &g, SupplementalGroups: []int64{5000}, FSGroup: &fs,
	}}}
	c := &v1.Container{SecurityContext: &v1.SecurityContext{
		RunAsUser: &cu, AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
		Capabilities: &v1.Capabilities{Add: []v1.Capability{"net_admin", "CAP_SYS_TIME"}, Drop: []v1.Capability{"ALL"}},
	}}
	lc, err := linuxContainerConfig(pod, c, 0)
	if err != nil {
		t.Fatal(err)
	}
	sc := lc.SecurityContext
	if sc.RunAsUser.GetValue() != cu || sc.RunAsGroup.GetValue() != g {
		t.Errorf("user %v group %v: the container's user wins, the pod's group fills in", sc.RunAsUser, sc.RunAsGroup)
	}
	if fmt.Sprint(sc.SupplementalGroups) != "[5000 4000]" {
		t.Errorf("supplemental groups %v, want the pod's and fsGroup", sc.SupplementalGroups)
	}
	if !sc.NoNewPrivs || !sc.ReadonlyRootfs {
		t.Errorf("noNewPrivs %v readonlyRootfs %v", sc.NoNewPrivs, sc.ReadonlyRootfs)
	}
	// Runtimes add the CAP_ prefix themselves.
	if got := fmt.Sprint(sc.Capabilities.AddCapabilities, sc.Capabilities.DropCapabilities); got != "[NET_ADMIN SYS_TIME] [ALL]" {
		t.Errorf("capabilities %s", got)
	}
}
