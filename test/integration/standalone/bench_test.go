//go:build integration

package standalone

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testutil"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

// BenchmarkStartPods measures, for N pods, the time from writing N static
// pod manifests to all N containers running, and in the same run the raw
// cost of the CRI calls that start N such pods directly (one goroutine per
// pod, as nodelet's workers do). It reports both and their ratio.
//
//	go test -run XXX -bench StartPods -benchtime 3x ./test/integration/standalone/
func BenchmarkStartPods(b *testing.B) {
	for _, n := range []int{1, 10, 30} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			node := testbed.StartNodelet(b, cd, testbed.NodeletOptions{})
			ctx := context.Background()
			var nodelet, raw time.Duration
			for i := 0; i < b.N; i++ {
				raw += rawStart(b, ctx, n, i)
				nodelet += nodeletStart(b, node, n, i)
			}
			b.ReportMetric(float64(nodelet.Milliseconds())/float64(b.N), "nodelet-ms")
			b.ReportMetric(float64(raw.Milliseconds())/float64(b.N), "raw-cri-ms")
			b.ReportMetric(float64(nodelet)/float64(raw), "ratio")
			b.Logf("%d pods: nodelet %v, raw CRI %v, ratio %.2f", n, nodelet/time.Duration(b.N), raw/time.Duration(b.N), float64(nodelet)/float64(raw))
		})
	}
}

// nodeletStart writes n manifests and waits for n running containers.
func nodeletStart(b *testing.B, node *testbed.Nodelet, n, iter int) time.Duration {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	for i := 0; i < n; i++ {
		node.WriteManifest(fmt.Sprintf("p%d.yaml", i), sleeper(fmt.Sprintf("bench-%d-%d", iter, i), "x"))
	}
	for {
		r, err := cd.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
			State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		}})
		if err != nil {
			b.Fatal(err)
		}
		if len(r.Containers) == n {
			break
		}
		if time.Since(start) > 2*time.Minute {
			b.Fatalf("%d of %d containers running after 2 minutes", len(r.Containers), n)
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
	elapsed := time.Since(start)

	b.StopTimer()
	for i := 0; i < n; i++ {
		testutil.Must(b, os.Remove(filepath.Join(node.Manifests, fmt.Sprintf("p%d.yaml", i))))
	}
	testbed.Eventually(b, 2*time.Minute, func() (bool, string) {
		sbs, err := cd.Sandboxes(ctx)
		return err == nil && len(sbs) == 0, fmt.Sprintf("%d sandboxes left", len(sbs))
	})
	b.StartTimer()
	return elapsed
}

// rawStart starts n pods with the CRI calls nodelet needs, made directly:
// run the sandbox, read its status (for the IP), check the image, create
// and start the container.
func rawStart(b *testing.B, ctx context.Context, n, iter int) time.Duration {
	b.Helper()
	logDir := b.TempDir()
	errs := make(chan error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			name := fmt.Sprintf("raw-%d-%d", iter, i)
			sbCfg := &runtimeapi.PodSandboxConfig{
				Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: name},
				Hostname:     name,
				LogDirectory: filepath.Join(logDir, name),
				// Not nodelet's uid label: the running nodelet would kill
				// pods it does not know.
				Labels: map[string]string{"bench.nodelet.io/uid": name, "bench.nodelet.io/name": name},
				Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
					NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER},
				}},
			}
			sb, err := cd.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sbCfg})
			if err != nil {
				errs <- err
				return
			}
			if _, err := cd.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.PodSandboxId}); err != nil {
				errs <- err
				return
			}
			img, err := cd.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: testbed.BusyboxImage}})
			if err != nil {
				errs <- err
				return
			}
			testutil.Must(b, os.MkdirAll(filepath.Join(logDir, name, "main"), 0o755))
			c, err := cd.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
				PodSandboxId: sb.PodSandboxId, SandboxConfig: sbCfg,
				Config: &runtimeapi.ContainerConfig{
					Metadata: &runtimeapi.ContainerMetadata{Name: "main"},
					Image:    &runtimeapi.ImageSpec{Image: img.Image.Id},
					Command:  []string{"sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"},
					LogPath:  "main/0.log",
					Labels:   map[string]string{"bench.nodelet.io/uid": name},
					Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
						NamespaceOptions: sbCfg.Linux.SecurityContext.NamespaceOptions,
					}},
				},
			})
			if err != nil {
				errs <- err
				return
			}
			if _, err := cd.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.StopTimer()
	if err := cd.RemoveAll(ctx); err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	return elapsed
}
