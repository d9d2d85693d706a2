//go:build integration

package standalone

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/testbed"
	"github.com/nodelet/nodelet/internal/testutil"
)

// writeKeyring writes the node's registry credentials where the kubelet
// keeps them: config.json in its root directory.
func writeKeyring(t *testing.T, n *testbed.Nodelet, host, user, password string) {
	t.Helper()
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	cfg := fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, host, auth)
	if err := os.WriteFile(filepath.Join(n.RootDir, "config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

func imagePod(name, image string, policy v1.PullPolicy) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: %s
    imagePullPolicy: %s
    command: ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
`, name, image, policy)
}

func waitingReason(p *v1.Pod) string {
	if w := mainStatus(p).State.Waiting; w != nil {
		return w.Reason
	}
	return ""
}

// Pulls from a real registry: anonymous, with the node's credentials
// (wrong ones back off until they are fixed), and each pull policy.
func TestImagePulls(t *testing.T) {
	reg := testbed.StartRegistry(t, cd)
	open := reg.Push(t, "open/busybox:1")
	private := reg.Push(t, "private/busybox:1")
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})

	t.Run("anonymous", func(t *testing.T) {
		n.WriteManifest("open.yaml", imagePod("open", open, v1.PullAlways))
		p := n.WaitPod(t, "open", podTimeout, func(p *v1.Pod) (bool, string) {
			return mainStatus(p).State.Running != nil, fmt.Sprintf("container %+v", mainStatus(p).State)
		})
		if got := mainStatus(p).Image; got != open {
			t.Errorf("status image %q, want %q", got, open)
		}
		if !strings.HasPrefix(mainStatus(p).ImageID, reg.Host+"/open/busybox@sha256:") {
			t.Errorf("status imageID %q is not the pulled digest", mainStatus(p).ImageID)
		}
		if reg.ManifestRequests("open/busybox") == 0 {
			t.Error("the registry never saw the pull")
		}
		if len(n.PodEvents("open", "Pulling")) != 1 || len(n.PodEvents("open", "Pulled")) != 1 {
			t.Errorf("want one Pulling and one Pulled event:\n%s", n.LogTail(40))
		}
	})

	t.Run("if-not-present", func(t *testing.T) {
		before := reg.ManifestRequests("open/busybox")
		n.WriteManifest("present.yaml", imagePod("present", open, v1.PullIfNotPresent))
		n.WaitPod(t, "present", podTimeout, func(p *v1.Pod) (bool, string) {
			return mainStatus(p).State.Running != nil, fmt.Sprintf("container %+v", mainStatus(p).State)
		})
		if got := reg.ManifestRequests("open/busybox"); got != before {
			t.Errorf("IfNotPresent with the image present asked the registry %d times", got-before)
		}
	})

	t.Run("never", func(t *testing.T) {
		n.WriteManifest("never.yaml", imagePod("never", reg.Host+"/open/absent:1", v1.PullNever))
		p := n.WaitPod(t, "never", podTimeout, func(p *v1.Pod) (bool, string) {
			return waitingReason(p) == "ErrImageNeverPull", "waiting reason " + waitingReason(p)
		})
		if msg := mainStatus(p).State.Waiting.Message; !strings.Contains(msg, "absent:1") {
			t.Errorf("message %q does not name the image", msg)
		}
		if reg.ManifestRequests("open/absent") != 0 {
			t.Error("pull policy Never pulled")
		}
	})

	t.Run("credentials", func(t *testing.T) {
		writeKeyring(t, n, reg.Host, testbed.RegistryUser, "wrong")
		n.WriteManifest("private.yaml", imagePod("private", private, v1.PullAlways))
		n.WaitPod(t, "private", podTimeout, func(p *v1.Pod) (bool, string) {
			return waitingReason(p) == "ErrImagePull", "waiting reason " + waitingReason(p)
		})
		p := n.WaitPod(t, "private", podTimeout, func(p *v1.Pod) (bool, string) {
			return waitingReason(p) == "ImagePullBackOff", "waiting reason " + waitingReason(p)
		})
		if msg := mainStatus(p).State.Waiting.Message; !strings.Contains(msg, private) {
			t.Errorf("back-off message %q does not name the image", msg)
		}
		if len(n.PodEvents("private", "Failed")) == 0 || len(n.PodEvents("private", "BackOff")) == 0 {
			t.Errorf("want Failed and BackOff events:\n%s", n.LogTail(40))
		}
		// Fixed credentials are read at the next attempt.
		writeKeyring(t, n, reg.Host, testbed.RegistryUser, testbed.RegistryPassword)
		n.WaitPod(t, "private", time.Minute, func(p *v1.Pod) (bool, string) {
			return mainStatus(p).State.Running != nil, fmt.Sprintf("container %+v", mainStatus(p).State)
		})
	})
}

// Image garbage collection removes unused images, never one a container
// uses or the sandbox image.
func TestImageGarbageCollection(t *testing.T) {
	reg := testbed.StartRegistry(t, cd)
	unused := reg.Push(t, "open/unused:1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Whatever the test removes, the next test has its images back.
	t.Cleanup(func() {
		if err := cd.ImportImages(context.Background()); err != nil {
			t.Error(err)
		}
	})
	if _, err := cd.Images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: unused}}); err != nil {
		t.Fatal(err)
	}
	// The pod that uses busybox runs first, with collection off (a 100%
	// threshold), however long its start takes; then nodelet restarts with
	// thresholds of 0%, which make every unused image a candidate at once.
	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{
		ExtraConfig: "imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 0\nimageMinimumGCAge: 1ms\n",
		Args:        []string{"--image-gc-period=1s", "--pod-infra-container-image=" + testbed.PauseImage},
	})
	n.WriteManifest("user.yaml", imagePod("user", testbed.BusyboxImage, v1.PullNever))
	n.WaitPod(t, "user", podTimeout, func(p *v1.Pod) (bool, string) {
		return mainStatus(p).State.Running != nil, fmt.Sprintf("container %+v", mainStatus(p).State)
	})
	n.Stop()
	cfg, err := os.ReadFile(n.Config)
	testutil.Must(t, err)
	testutil.Must(t, os.WriteFile(n.Config, []byte(strings.Replace(string(cfg), "imageGCHighThresholdPercent: 100", "imageGCHighThresholdPercent: 0", 1)), 0o644))
	n.Start()
	present := func(image string) bool {
		resp, err := cd.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: image}})
		return err == nil && resp.GetImage() != nil
	}
	testbed.Eventually(t, 30*time.Second, func() (bool, string) {
		return !present(unused), "the unused image is still there"
	})
	for _, image := range []string{testbed.BusyboxImage, testbed.PauseImage} {
		if !present(image) {
			t.Errorf("%s was removed", image)
		}
	}
	// The image is gone when the runtime says so; nodelet logs it after.
	testbed.Eventually(t, 5*time.Second, func() (bool, string) {
		return strings.Contains(n.Log(), "Removed unused image"), "the removal was not logged"
	})
}

// TestCredentialProviderPlugin: a private image pulls with credentials
// only an image credential provider plugin hands out. Without the plugin
// the pull is refused; with it the pod runs, the plugin is asked for the
// image's repository, and its answer (cached for the registry) serves a
// second pod without asking again.
func TestCredentialProviderPlugin(t *testing.T) {
	reg := testbed.StartRegistry(t, cd)
	private := reg.Push(t, "private/plugin:1")
	plugin, err := testbed.GoBinary("./test/credentialplugin")
	testutil.Must(t, err)
	dir := t.TempDir()
	bin, log := filepath.Join(dir, "bin"), filepath.Join(dir, "requests.log")
	testutil.Must(t, os.MkdirAll(bin, 0o755))
	data, err := os.ReadFile(plugin)
	testutil.Must(t, err)
	testutil.Must(t, os.WriteFile(filepath.Join(bin, "test-registry"), data, 0o755))
	config := filepath.Join(dir, "credential-providers.yaml")
	testutil.Must(t, os.WriteFile(config, []byte(fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: test-registry
  matchImages: [%q]
  defaultCacheDuration: 10m
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  args: [--registry, %q, --user, %q, --password, %q]
  env:
  - {name: PLUGIN_LOG, value: %q}
`, reg.Host, reg.Host, testbed.RegistryUser, testbed.RegistryPassword, log)), 0o644))

	n := testbed.StartNodelet(t, cd, testbed.NodeletOptions{})
	n.WriteManifest("private.yaml", imagePod("private", private, v1.PullAlways))
	n.WaitPod(t, "private", podTimeout, func(p *v1.Pod) (bool, string) {
		return waitingReason(p) == "ErrImagePull" || waitingReason(p) == "ImagePullBackOff", "waiting reason " + waitingReason(p)
	})
	n.Stop()
	n.AddArgs("--image-credential-provider-config="+config, "--image-credential-provider-bin-dir="+bin)
	n.Start()
	n.WaitPod(t, "private", time.Minute, func(p *v1.Pod) (bool, string) {
		return mainStatus(p).State.Running != nil, fmt.Sprintf("container %+v", mainStatus(p).State)
	})
	n.WriteManifest("private2.yaml", imagePod("private2", private, v1.PullAlways))
	n.WaitPod(t, "private2", podTimeout, func(p *v1.Pod) (bool, string) {
		return mainStatus(p).State.Running != nil, fmt.Sprintf("container %+v", mainStatus(p).State)
	})
	requests, err := os.ReadFile(log)
	testutil.Must(t, err)
	lines := strings.Split(strings.TrimSpace(string(requests)), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `"image":"`+reg.Host+`/private/plugin"`) ||
		!strings.Contains(lines[0], `"apiVersion":"credentialprovider.kubelet.k8s.io/v1"`) {
		t.Fatalf("plugin requests (want one, for the repository):\n%s", requests)
	}
	if reg.ManifestRequests("private/plugin") < 3 {
		t.Errorf("the registry saw %d manifest requests: the pods did not both pull", reg.ManifestRequests("private/plugin"))
	}
}
