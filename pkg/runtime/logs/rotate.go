// Package logs keeps containers' log files within containerLogMaxSize and
// containerLogMaxFiles. The runtime writes each container's output to the
// file nodelet named for it (pods/<ns>_<name>_<uid>/<container>/<n>.log);
// it never trims it. Every containerLogMonitorInterval the Rotator looks
// at each running container's file and, once it is too big, renames it
// to <n>.log.<timestamp> and asks the runtime to reopen the original
// name (CRI ReopenContainerLog), so writing goes on in a fresh file while
// the rotated ones are compressed and the oldest removed.
//
// kubectl logs reads the current file only, as upstream's does; a
// follower moves to the fresh file when it sees the rename.
package logs

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Runtime is what the rotator asks of the container runtime.
type Runtime interface {
	ListContainers(ctx context.Context, in *runtimeapi.ListContainersRequest, opts ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error)
	ContainerStatus(ctx context.Context, in *runtimeapi.ContainerStatusRequest, opts ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error)
	ReopenContainerLog(ctx context.Context, in *runtimeapi.ReopenContainerLogRequest, opts ...grpc.CallOption) (*runtimeapi.ReopenContainerLogResponse, error)
}

// Policy is the rotation policy (the KubeletConfiguration's
// containerLog* fields).
type Policy struct {
	MaxSize  int64 // bytes a log file may reach before it is rotated
	MaxFiles int   // files per container, the current one included; at least 2
	Workers  int   // containers rotated at once
	Interval time.Duration
}

// timestampFormat names rotated files, as upstream names them.
const timestampFormat = "20060102-150405"

const (
	compressSuffix = ".gz"
	tmpSuffix      = ".tmp"
)

// Rotator rotates containers' logs.
type Rotator struct {
	runtime Runtime
	policy  Policy
	clock   clock.Clock
	timeout time.Duration

	// paths are the running containers' log paths, fixed when a
	// container is created: each is asked of the runtime once, not every
	// Interval (110 ContainerStatus calls every 10 s on a full node).
	mu    sync.Mutex
	paths map[string]string
}

// NewRotator returns a rotator; timeout bounds each runtime call.
func NewRotator(rt Runtime, p Policy, clk clock.Clock, timeout time.Duration) *Rotator {
	if p.Workers < 1 {
		p.Workers = 1
	}
	return &Rotator{runtime: rt, policy: p, clock: clk, timeout: timeout, paths: map[string]string{}}
}

// Run rotates every Interval until ctx ends.
func (r *Rotator) Run(ctx context.Context) {
	for {
		if err := r.RotateAll(ctx); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Rotating container logs failed")
		}
		select {
		case <-ctx.Done():
			return
		case <-r.clock.After(r.policy.Interval):
		}
	}
}

// RotateAll looks at every running container's log once. A container
// that fails does not keep the others from being rotated; the errors are
// returned together.
func (r *Rotator) RotateAll(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	resp, err := r.runtime.ListContainers(cctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	}})
	cancel()
	if err != nil {
		return fmt.Errorf("listing running containers: %w", err)
	}
	r.forgetExcept(resp.Containers)
	ids := make(chan string)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range r.policy.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				if err := r.rotateContainer(ctx, id); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("container %s: %w", id, err))
					mu.Unlock()
				}
			}
		}()
	}
	for _, c := range resp.Containers {
		ids <- c.Id
	}
	close(ids)
	wg.Wait()
	return errors.Join(errs...)
}

// forgetExcept keeps the log paths of the listed containers only.
func (r *Rotator) forgetExcept(running []*runtimeapi.Container) {
	keep := make(map[string]bool, len(running))
	for _, c := range running {
		keep[c.Id] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range r.paths {
		if !keep[id] {
			delete(r.paths, id)
		}
	}
}

// logPath is a running container's log path ("" for none).
func (r *Rotator) logPath(ctx context.Context, id string) (string, error) {
	r.mu.Lock()
	path, ok := r.paths[id]
	r.mu.Unlock()
	if ok {
		return path, nil
	}
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	st, err := r.runtime.ContainerStatus(cctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	cancel()
	if err != nil {
		return "", fmt.Errorf("container status: %w", err)
	}
	if st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return "", nil // exited since the list: not remembered
	}
	path = st.GetStatus().GetLogPath()
	r.mu.Lock()
	r.paths[id] = path
	r.mu.Unlock()
	return path, nil
}

func (r *Rotator) rotateContainer(ctx context.Context, id string) error {
	path, err := r.logPath(ctx, id)
	if err != nil || path == "" {
		return err
	}
	removeTemporary(path)
	fi, err := os.Stat(path)
	if err != nil {
		if os.IsNotExist(err) {
			// Someone removed it: have the runtime make a new one.
			return r.reopen(ctx, id)
		}
		return err
	}
	if fi.Size() < r.policy.MaxSize {
		return nil
	}
	rotated, err := rotatedLogs(path)
	if err != nil {
		return err
	}
	// After this rotation there are MaxFiles-1 rotated files besides the
	// current one.
	keep := max(r.policy.MaxFiles-2, 0)
	for len(rotated) > keep {
		if err := os.Remove(rotated[0]); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("removing an old rotated log: %w", err)
		}
		rotated = rotated[1:]
	}
	// The newest rotated file is compressed only now: until the last
	// reopen the runtime may still have been writing to it.
	for _, f := range rotated {
		if !strings.HasSuffix(f, compressSuffix) {
			if err := compress(f); err != nil {
				return err
			}
		}
	}
	return r.rotateLatest(ctx, id, path)
}

func (r *Rotator) rotateLatest(ctx context.Context, id, path string) error {
	target := path + "." + r.clock.Now().Format(timestampFormat)
	if _, err := os.Stat(target); err == nil {
		// Rotated within the same second already; next round.
		return nil
	}
	if err := os.Rename(path, target); err != nil {
		return fmt.Errorf("rotating the log: %w", err)
	}
	if err := r.reopen(ctx, id); err != nil {
		// The runtime still writes to the renamed file: give it its name
		// back so the log stays where readers look for it.
		if rerr := os.Rename(target, path); rerr != nil {
			return errors.Join(err, fmt.Errorf("renaming the log back: %w", rerr))
		}
		return err
	}
	klog.V(4).InfoS("Rotated a container log", "containerID", id, "path", path, "rotated", target)
	return nil
}

func (r *Rotator) reopen(ctx context.Context, id string) error {
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	if _, err := r.runtime.ReopenContainerLog(cctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: id}); err != nil {
		return fmt.Errorf("reopening the log: %w", err)
	}
	return nil
}

// rotatedLogs lists path's rotated files, oldest first (the timestamps
// sort as strings).
func rotatedLogs(path string) ([]string, error) {
	matches, err := filepath.Glob(globEscape(path) + ".*")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range matches {
		if !strings.HasSuffix(m, tmpSuffix) {
			out = append(out, m)
		}
	}
	sort.Strings(out)
	return out, nil
}

// RemoveRotated removes a container's rotated logs, for when the
// container itself is removed.
func RemoveRotated(path string) error {
	matches, err := filepath.Glob(globEscape(path) + ".*")
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range matches {
		if err := os.Remove(m); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeTemporary removes what an interrupted compression left.
func removeTemporary(path string) {
	matches, _ := filepath.Glob(globEscape(path) + ".*" + tmpSuffix)
	for _, m := range matches {
		os.Remove(m)
	}
}

func globEscape(path string) string {
	r := strings.NewReplacer(`*`, `\*`, `?`, `\?`, `[`, `\[`, `\`, `\\`)
	return r.Replace(path)
}

// compress gzips a rotated file in place of it; a temporary file keeps a
// half-written archive from ever carrying the final name.
func compress(path string) error {
	in, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("compressing a rotated log: %w", err)
	}
	defer in.Close()
	tmp := path + compressSuffix + tmpSuffix
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o640)
	if err != nil {
		return fmt.Errorf("compressing a rotated log: %w", err)
	}
	zw := gzip.NewWriter(out)
	_, err = io.Copy(zw, in)
	err = errors.Join(err, zw.Close(), out.Close())
	if err == nil {
		err = os.Rename(tmp, path+compressSuffix)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("compressing a rotated log: %w", err)
	}
	return os.Remove(path)
}
