package testbed

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Floor measures the raw CRI cost of starting and stopping pods: the calls
// nodelet makes for a one-container pod, made directly, so benchmarks can
// print nodelet's figures as ratios to it. Its pods carry labels of their
// own, never nodelet's, so a running nodelet leaves them alone.
type Floor struct {
	CD *Containerd
	// Parallel is how many pods are worked on at once.
	Parallel int
	// LogDir holds the containers' logs.
	LogDir string

	pods []floorPod
	mu   sync.Mutex
	// calls sums each CRI method's latency, for comparison with nodelet's
	// kubelet_runtime_operations_duration_seconds.
	calls map[string]CallStats
}

// CallStats sums the latency of one kind of call.
type CallStats struct {
	Count int
	Total time.Duration
}

// Mean is the average latency.
func (c CallStats) Mean() time.Duration {
	if c.Count == 0 {
		return 0
	}
	return c.Total / time.Duration(c.Count)
}

// Calls returns the latency of each kind of call made so far, by
// upstream's operation name (run_podsandbox, create_container, …).
func (f *Floor) Calls() map[string]CallStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]CallStats, len(f.calls))
	for k, v := range f.calls {
		out[k] = v
	}
	return out
}

// timed runs one call and records its latency under op.
func (f *Floor) timed(op string, call func() error) error {
	start := time.Now()
	err := call()
	d := time.Since(start)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[string]CallStats{}
	}
	c := f.calls[op]
	c.Count++
	c.Total += d
	f.calls[op] = c
	return err
}

type floorPod struct {
	sandbox, container string
}

// SleeperCommand sleeps and exits at once on SIGTERM, as the benchmarks'
// pods do.
var SleeperCommand = []string{"sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"}

// Start starts n pods, Parallel at a time, in order, and returns when
// each one's container started, measured from the call.
func (f *Floor) Start(ctx context.Context, prefix string, n int) ([]time.Duration, error) {
	f.pods = make([]floorPod, n)
	return f.each(n, func(i int) error {
		return f.start(ctx, i, fmt.Sprintf("%s-%d", prefix, i))
	})
}

// Stop stops the pods Start started (container, then sandbox), Parallel at
// a time, and returns when each one's sandbox stopped. Remove removes them.
func (f *Floor) Stop(ctx context.Context) ([]time.Duration, error) {
	return f.each(len(f.pods), func(i int) error {
		p := f.pods[i]
		err := f.timed("stop_container", func() error {
			_, err := f.CD.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: p.container, Timeout: 30})
			return err
		})
		if err != nil {
			return err
		}
		return f.timed("stop_podsandbox", func() error {
			_, err := f.CD.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.sandbox})
			return err
		})
	})
}

// Remove removes every pod Start started.
func (f *Floor) Remove(ctx context.Context) error {
	for _, p := range f.pods {
		if _, err := f.CD.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.sandbox}); err != nil {
			return err
		}
	}
	f.pods = nil
	return nil
}

// each runs fn for 0..n-1, Parallel at a time and in order, and returns
// each one's completion time measured from the start.
func (f *Floor) each(n int, fn func(i int) error) ([]time.Duration, error) {
	out := make([]time.Duration, n)
	next := make(chan int, n)
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	start := time.Now()
	for w := 0; w < max(f.Parallel, 1); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				err := fn(i)
				mu.Lock()
				out[i] = time.Since(start)
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out, firstErr
}

// start makes the calls nodelet makes for a new pod: run the sandbox, read
// its status (for the IP), check the image, create and start the container.
func (f *Floor) start(ctx context.Context, i int, name string) error {
	sbCfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: name},
		Hostname:     name,
		LogDirectory: filepath.Join(f.LogDir, name),
		Labels:       map[string]string{"bench.nodelet.io/uid": name, "bench.nodelet.io/name": name},
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}
	var sb *runtimeapi.RunPodSandboxResponse
	err := f.timed("run_podsandbox", func() (err error) {
		sb, err = f.CD.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sbCfg})
		return err
	})
	if err != nil {
		return err
	}
	f.pods[i].sandbox = sb.PodSandboxId
	err = f.timed("podsandbox_status", func() error {
		_, err := f.CD.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.PodSandboxId})
		return err
	})
	if err != nil {
		return err
	}
	img, err := f.CD.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: BusyboxImage}})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(f.LogDir, name, "main"), 0o755); err != nil {
		return err
	}
	var c *runtimeapi.CreateContainerResponse
	err = f.timed("create_container", func() (err error) {
		c, err = f.CD.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
			PodSandboxId: sb.PodSandboxId, SandboxConfig: sbCfg,
			Config: &runtimeapi.ContainerConfig{
				Metadata: &runtimeapi.ContainerMetadata{Name: "main"},
				Image:    &runtimeapi.ImageSpec{Image: img.Image.Id},
				Command:  SleeperCommand,
				LogPath:  "main/0.log",
				Labels:   map[string]string{"bench.nodelet.io/uid": name},
				Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
					NamespaceOptions: sbCfg.Linux.SecurityContext.NamespaceOptions,
				}},
			},
		})
		return err
	})
	if err != nil {
		return err
	}
	f.pods[i].container = c.ContainerId
	return f.timed("start_container", func() error {
		_, err := f.CD.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId})
		return err
	})
}
