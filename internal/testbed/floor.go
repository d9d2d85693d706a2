package testbed

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
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
	// Template, if set, is the configuration to start pods with; else a
	// minimal sandbox and container of its own.
	Template *FloorTemplate

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
	sbCfg, cCfg := f.configs(name)
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
	cCfg.Image = &runtimeapi.ImageSpec{Image: img.Image.Id}
	if err := os.MkdirAll(filepath.Join(sbCfg.LogDirectory, filepath.Dir(cCfg.LogPath)), 0o755); err != nil {
		return err
	}
	var c *runtimeapi.CreateContainerResponse
	err = f.timed("create_container", func() (err error) {
		c, err = f.CD.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, SandboxConfig: sbCfg, Config: cCfg})
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

// configs returns a floor pod's sandbox and container configuration: the
// template's, or a minimal one-container pod.
func (f *Floor) configs(name string) (*runtimeapi.PodSandboxConfig, *runtimeapi.ContainerConfig) {
	if f.Template != nil {
		return f.Template.configs(name, f.LogDir)
	}
	sbCfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: name},
		Hostname:     name,
		LogDirectory: filepath.Join(f.LogDir, name),
		Labels:       map[string]string{"bench.nodelet.io/uid": name, "bench.nodelet.io/name": name},
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}
	return sbCfg, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "main"},
		Command:  SleeperCommand,
		LogPath:  "main/0.log",
		Labels:   map[string]string{"bench.nodelet.io/uid": name},
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: sbCfg.Linux.SecurityContext.NamespaceOptions,
		}},
	}
}

// FloorTemplate is the sandbox and container configuration of one of
// nodelet's pods as nodelet sent it to the runtime. A Floor with a
// template replays it for each of its pods (with names, labels, logs,
// cgroups and volume files of its own), so the floor makes exactly the
// runtime calls nodelet makes and a comparison measures nodelet alone.
type FloorTemplate struct {
	Sandbox   *runtimeapi.PodSandboxConfig
	Container *runtimeapi.ContainerConfig
	// dir holds copies of the files the container's mounts bind.
	dir string
}

// CaptureTemplate reads the configuration of a running pod's sandbox and
// first container from the runtime's verbose status, and copies the files
// its mounts bind under dir, so the template outlives the pod.
func CaptureTemplate(ctx context.Context, cd *Containerd, podName, dir string) (*FloorTemplate, error) {
	sbs, err := cd.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.name": podName},
	}})
	if err != nil || len(sbs.Items) == 0 {
		return nil, fmt.Errorf("no sandbox for pod %s: %v", podName, err)
	}
	t := &FloorTemplate{Sandbox: &runtimeapi.PodSandboxConfig{}, Container: &runtimeapi.ContainerConfig{}, dir: dir}
	sb, err := cd.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sbs.Items[0].Id, Verbose: true})
	if err != nil {
		return nil, err
	}
	if err := verboseConfig(sb.Info, t.Sandbox); err != nil {
		return nil, fmt.Errorf("sandbox of %s: %w", podName, err)
	}
	cs, err := cd.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: sbs.Items[0].Id}})
	if err != nil || len(cs.Containers) == 0 {
		return nil, fmt.Errorf("no container for pod %s: %v", podName, err)
	}
	c, err := cd.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: cs.Containers[0].Id, Verbose: true})
	if err != nil {
		return nil, err
	}
	if err := verboseConfig(c.Info, t.Container); err != nil {
		return nil, fmt.Errorf("container of %s: %w", podName, err)
	}
	for i, m := range t.Container.Mounts {
		copyTo := filepath.Join(dir, fmt.Sprintf("mount-%d", i))
		if out, err := exec.Command("cp", "-a", m.HostPath, copyTo).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("copying %s: %v: %s", m.HostPath, err, out)
		}
		m.HostPath = copyTo
	}
	return t, nil
}

// verboseConfig decodes the "config" containerd puts in a verbose status.
func verboseConfig(info map[string]string, into any) error {
	var v struct {
		Config json.RawMessage `json:"config"`
	}
	if err := json.Unmarshal([]byte(info["info"]), &v); err != nil {
		return err
	}
	if len(v.Config) == 0 {
		return fmt.Errorf("the runtime's verbose status has no config")
	}
	return json.Unmarshal(v.Config, into)
}

// configs returns the template's configuration for the floor pod name.
func (t *FloorTemplate) configs(name, logDir string) (*runtimeapi.PodSandboxConfig, *runtimeapi.ContainerConfig) {
	sb := proto.Clone(t.Sandbox).(*runtimeapi.PodSandboxConfig)
	sb.Metadata = &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: name}
	sb.Hostname = name
	sb.LogDirectory = filepath.Join(logDir, name)
	sb.Labels = map[string]string{"bench.nodelet.io/uid": name, "bench.nodelet.io/name": name}
	sb.Annotations = nil
	if sb.Linux != nil && sb.Linux.CgroupParent != "" {
		// A pod cgroup of its own, as nodelet gives each pod, but outside
		// nodelet's hierarchy so nodelet never takes it for an orphan.
		sb.Linux.CgroupParent = CgroupRoot() + "/floor/pod" + name
	}
	c := proto.Clone(t.Container).(*runtimeapi.ContainerConfig)
	c.Labels = map[string]string{"bench.nodelet.io/uid": name}
	c.Annotations = nil
	return sb, c
}
