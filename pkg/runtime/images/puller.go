package images

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/credentialprovider"
	"github.com/nodelet/nodelet/pkg/runtime/crierr"
)

const (
	imageBackOffInitial = 10 * time.Second
	imageBackOffMax     = 5 * time.Minute
)

// ImageService is the part of the CRI image service the puller uses.
type ImageService interface {
	ImageStatus(ctx context.Context, in *runtimeapi.ImageStatusRequest, opts ...grpc.CallOption) (*runtimeapi.ImageStatusResponse, error)
	PullImage(ctx context.Context, in *runtimeapi.PullImageRequest, opts ...grpc.CallOption) (*runtimeapi.PullImageResponse, error)
}

// PullObserver learns when a pod's image pulls started and ended, so the
// pod start SLI can leave out the time spent pulling.
type PullObserver interface {
	ObservePull(pod types.UID, start, end time.Time)
}

// PullerOptions configure a Puller.
type PullerOptions struct {
	Images   ImageService
	Recorder record.EventRecorder
	Clock    clock.Clock
	// Timeout bounds each runtime call but the pull itself.
	Timeout time.Duration
	// MaxParallel caps concurrent pulls (serializeImagePulls,
	// maxParallelImagePulls); 0 means no cap.
	MaxParallel int
	// KeyringDir holds the node's own registry credentials (config.json,
	// .dockercfg), read on every pull.
	KeyringDir string
	// Observer, if set, learns of each pull.
	Observer PullObserver
	// Plugins, if set, are the image credential provider plugins.
	Plugins CredentialPlugins
	// Records, if set, keep which credentials pulled each image, and
	// Verify says which present images a pod must prove access to.
	Records *PullRecords
	Verify  VerifyPolicy
}

// CredentialPlugins hand out credentials for an image's repository.
type CredentialPlugins interface {
	Credentials(ctx context.Context, repository string) ([]credentialprovider.Auth, error)
}

// Puller makes sure a container's image is present, honouring the pull
// policy, the pod's pull secrets and the node's credentials, and backing
// off per pod and image after failed pulls (one pod's bad credentials or
// typo does not hold back another pod pulling the same image). Concurrent requests for the same
// image share one pull.
type Puller struct {
	images     ImageService
	recorder   record.EventRecorder
	clock      clock.Clock
	timeout    time.Duration
	backOff    *flowcontrol.Backoff
	keyringDir string
	observer   PullObserver
	plugins    CredentialPlugins
	records    *PullRecords
	verify     VerifyPolicy

	// slots caps concurrent pulls; nil means no cap.
	slots chan struct{}

	mu       sync.Mutex
	inflight map[string]*pull
	// failed is when each back-off key's last pull failed, for the time
	// its back-off has left.
	failed map[string]time.Time
	// known is what the runtime said of each image ID. An ID names
	// immutable content, so it stays true: a container start asks the
	// runtime about its image once, not once more for its size and again
	// for its user.
	known map[string]*runtimeapi.Image
}

// maxKnownImages bounds known; past it, it starts over.
const maxKnownImages = 512

type pull struct {
	done chan struct{}
	ref  string
	by   puller
	err  error
	// sharers counts the callers waiting on this pull besides its own
	// (guarded by the puller's mu).
	sharers int
}

// NewPuller returns an image puller.
func NewPuller(o PullerOptions) *Puller {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Recorder == nil {
		o.Recorder = &record.FakeRecorder{}
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Minute
	}
	b := flowcontrol.NewBackOffWithJitter(imageBackOffInitial, imageBackOffMax, 0)
	b.Clock = o.Clock
	p := &Puller{images: o.Images, recorder: o.Recorder, clock: o.Clock, timeout: o.Timeout, backOff: b,
		keyringDir: o.KeyringDir, observer: o.Observer, plugins: o.Plugins, records: o.Records, verify: o.Verify,
		inflight: map[string]*pull{}, failed: map[string]time.Time{}, known: map[string]*runtimeapi.Image{}}
	if o.MaxParallel > 0 {
		p.slots = make(chan struct{}, o.MaxParallel)
	}
	return p
}

// nodeCredentials are the node's own credentials for an image: its
// keyring files, then what the credential plugins that cover it answer. A
// plugin that fails is reported on the container; the pull goes on with
// what the rest gave.
func (p *Puller) nodeCredentials(ctx context.Context, ref *v1.ObjectReference, image string) []credentials {
	out := nodeCredentials(p.keyringDir)
	if p.plugins == nil {
		return out
	}
	host, path, ok := credentialprovider.Repository(image)
	if !ok {
		return out
	}
	auth, err := p.plugins.Credentials(ctx, host+"/"+path)
	if err != nil {
		klog.ErrorS(err, "An image credential provider failed", "image", image)
		p.recorder.Eventf(ref, v1.EventTypeWarning, "FailedToRetrieveImageCredentials", "Image credential provider failed for %q: %v", image, err)
	}
	return append(out, pluginCredentials(auth))
}

// ForgetBackOffs drops back-offs that have run out.
// ForgetBackOffs drops back-offs that ended long ago.
func (p *Puller) ForgetBackOffs() {
	p.backOff.GC()
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, at := range p.failed {
		if p.clock.Since(at) > 2*imageBackOffMax {
			delete(p.failed, key)
		}
	}
}

// backOffKey is what a pull back-off is kept under: the pod and the
// image, as upstream keys it.
func backOffKey(uid types.UID, image string) string { return string(uid) + "_" + image }

// EnsureImage returns the image reference to create the container from,
// or one of the container package's image errors with a message for the
// container's status.
func (p *Puller) EnsureImage(ctx context.Context, pod *v1.Pod, c *v1.Container, pullSecrets []v1.Secret, sandbox *runtimeapi.PodSandboxConfig) (string, string, error) {
	ref := podutil.ContainerRef(pod, c)
	secrets := secretCredentials(pullSecrets)
	auth := authConfigs(c.Image, secrets, p.nodeCredentials(ctx, ref, c.Image))
	image := c.Image
	if strings.TrimSpace(image) == "" || strings.ContainsAny(image, " \t\n") {
		msg := fmt.Sprintf("Failed to apply default image tag %q: invalid reference format", image)
		p.recorder.Event(ref, v1.EventTypeWarning, "InspectFailed", msg)
		return "", msg, container.ErrInvalidImageName
	}
	policy := c.ImagePullPolicy
	if policy == "" {
		policy = podutil.DefaultPullPolicy(image)
	}

	if policy != v1.PullAlways {
		present, err := p.presentRef(ctx, image)
		if err != nil {
			msg := fmt.Sprintf("Failed to inspect image %q: %v", image, err)
			p.recorder.Event(ref, v1.EventTypeWarning, "InspectFailed", msg)
			return "", msg, container.ErrImagePull
		}
		switch {
		case present != "" && !p.records.mustPull(p.verify, image, present, secretIDs(secrets)):
			p.recorder.Eventf(ref, v1.EventTypeNormal, "Pulled", "Container image %q already present on machine", image)
			return present, "", nil
		case present != "" && policy == v1.PullNever:
			msg := fmt.Sprintf("Container image %q is present, but was pulled with credentials this pod does not have, and its pull policy is Never", image)
			p.recorder.Event(ref, v1.EventTypeWarning, "ErrImageNeverPull", msg)
			return "", msg, container.ErrImageNeverPull
		case present != "":
			klog.V(2).InfoS("Image present but pulled with credentials the pod does not have: pulling it with the pod's", "pod", klog.KObj(pod), "podUID", pod.UID, "image", image)
		case policy == v1.PullNever:
			msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", image)
			p.recorder.Event(ref, v1.EventTypeWarning, "ErrImageNeverPull", msg)
			return "", msg, container.ErrImageNeverPull
		}
	}

	backOffKey := backOffKey(pod.UID, image)
	if p.backOff.IsInBackOffSinceUpdate(backOffKey, p.clock.Now()) {
		msg := fmt.Sprintf("Back-off pulling image %q", image)
		p.recorder.Event(ref, v1.EventTypeNormal, "BackOff", msg)
		return "", msg, container.ErrImagePullBackOff
	}
	p.recorder.Eventf(ref, v1.EventTypeNormal, "Pulling", "Pulling image %q", image)
	start := p.clock.Now()
	if p.records != nil {
		if err := p.records.intend(image); err != nil {
			klog.ErrorS(err, "Failed to record an image pull intent", "image", image)
		}
	}
	imageRef, by, err := p.pull(ctx, image, auth, sandbox)
	if p.observer != nil {
		p.observer.ObservePull(pod.UID, start, p.clock.Now())
	}
	if err != nil && ctx.Err() != nil {
		// The pod is being torn down: its pull was abandoned, not failed.
		return "", "", fmt.Errorf("pulling image %q: %w", image, ctx.Err())
	}
	if err != nil {
		p.backOff.Next(backOffKey, p.clock.Now())
		p.mu.Lock()
		p.failed[backOffKey] = p.clock.Now()
		p.mu.Unlock()
		msg := fmt.Sprintf("Failed to pull image %q: %s", image, crierr.Message(err))
		p.recorder.Event(ref, v1.EventTypeWarning, "Failed", msg)
		return "", msg, container.ErrImagePull
	}
	p.backOff.Reset(backOffKey)
	if p.records != nil {
		if err := p.records.done(image, imageRef, by); err != nil {
			klog.ErrorS(err, "Failed to record who pulled an image", "image", image, "imageRef", imageRef)
		}
	}
	p.recorder.Eventf(ref, v1.EventTypeNormal, "Pulled", "Successfully pulled image %q in %s", image, p.clock.Since(start).Round(time.Millisecond))
	return imageRef, "", nil
}

// presentRef returns the image's ID when the runtime has it, "" otherwise.
func (p *Puller) presentRef(ctx context.Context, image string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	resp, err := p.images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: image}})
	if err != nil {
		return "", err
	}
	if resp.GetImage() == nil {
		return "", nil
	}
	p.remember(resp.GetImage())
	return resp.GetImage().GetId(), nil
}

// remember keeps what the runtime said of an image, by its ID.
func (p *Puller) remember(img *runtimeapi.Image) {
	if img.GetId() == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.known) >= maxKnownImages {
		clear(p.known)
	}
	p.known[img.GetId()] = img
}

// pull fetches an image, sharing the work with any pull of the same image
// with the same credentials already under way (a pull with other
// credentials proves nothing for this pod).
func (p *Puller) pull(ctx context.Context, image string, auth []authOption, sandbox *runtimeapi.PodSandboxConfig) (string, puller, error) {
	key := pullKey(image, auth)
	p.mu.Lock()
	if inflight, ok := p.inflight[key]; ok {
		inflight.sharers++
		p.mu.Unlock()
		select {
		case <-inflight.done:
			return inflight.ref, inflight.by, inflight.err
		case <-ctx.Done():
			return "", puller{}, ctx.Err()
		}
	}
	call := &pull{done: make(chan struct{})}
	p.inflight[key] = call
	p.mu.Unlock()

	if p.slots != nil {
		select {
		case p.slots <- struct{}{}:
			release := p.holdSlot(image)
			call.ref, call.by, call.err = p.pullOnce(ctx, image, auth, sandbox)
			release()
		case <-ctx.Done():
			call.err = ctx.Err()
		}
	} else {
		call.ref, call.by, call.err = p.pullOnce(ctx, image, auth, sandbox)
	}
	p.mu.Lock()
	delete(p.inflight, key)
	p.mu.Unlock()
	close(call.done)
	return call.ref, call.by, call.err
}

// pullKey names a pull by its image and the credentials it tries.
func pullKey(image string, auth []authOption) string {
	h := sha256.New()
	for _, a := range auth {
		fmt.Fprintf(h, "%q:%q;", a.auth.GetUsername(), a.auth.GetPassword())
	}
	return fmt.Sprintf("%s#%x", image, h.Sum(nil))
}

// holdSlot returns the function that gives a pull's slot back. A pull
// still running after the request timeout gives it back early: a stuck
// (or very slow) pull must not hold up every other image's. The pull
// itself goes on, bounded by the runtime's own progress deadline
// (containerd's image_pull_progress_timeout), as upstream's is.
func (p *Puller) holdSlot(image string) func() {
	var once sync.Once
	release := func() { once.Do(func() { <-p.slots }) }
	done := make(chan struct{})
	timeout := p.clock.After(p.timeout)
	go func() {
		select {
		case <-timeout:
			klog.InfoS("Image pull still running after the runtime request timeout: letting other pulls start", "image", image, "timeout", p.timeout)
			release()
		case <-done:
		}
	}()
	return func() {
		close(done)
		release()
	}
}

func (p *Puller) pullOnce(ctx context.Context, image string, auths []authOption, sandbox *runtimeapi.PodSandboxConfig) (string, puller, error) {
	if len(auths) == 0 {
		// Anonymous: any pod on the node could have pulled it.
		auths = []authOption{{by: puller{node: true}}}
	}
	var lastErr error
	for _, a := range auths {
		resp, err := p.images.PullImage(ctx, &runtimeapi.PullImageRequest{
			Image: &runtimeapi.ImageSpec{Image: image}, Auth: a.auth, SandboxConfig: sandbox,
		})
		if err == nil {
			return resp.ImageRef, a.by, nil
		}
		lastErr = err
	}
	return "", puller{}, lastErr
}

// BackOffLeft is how long a pod's pull back-off for an image has left.
func (p *Puller) BackOffLeft(uid types.UID, image string) time.Duration {
	key := backOffKey(uid, image)
	p.mu.Lock()
	failed, ok := p.failed[key]
	p.mu.Unlock()
	if !ok {
		return 0
	}
	if left := p.backOff.Get(key) - p.clock.Since(failed); left > 0 {
		return left
	}
	return 0
}

// Image describes an image by its ID (nil when unknown): from what the
// runtime said of it before, or else from the runtime.
func (p *Puller) Image(ctx context.Context, ref string) *runtimeapi.Image {
	p.mu.Lock()
	img, ok := p.known[ref]
	p.mu.Unlock()
	if ok {
		return img
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	resp, err := p.images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil || resp.GetImage() == nil {
		return nil
	}
	if resp.GetImage().GetId() == ref {
		p.remember(resp.GetImage())
	}
	return resp.GetImage()
}
