package kuberuntime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/runtime/crierr"
)

// LegacyContainerLogsDir is where the kubelet links every container's log
// as <pod>_<namespace>_<container>-<container ID>.log, the path log
// shippers (fluentd, fluent-bit, vector) and upstream's node e2e suite
// ("ContainerLogPath") read.
const LegacyContainerLogsDir = "/var/log/containers"

// legacyLogs keeps those links in a directory ("" keeps none): made when a
// container starts, removed with the container, and swept when dangling.
type legacyLogs string

// maxFileName is the longest file name ext4 allows.
const maxFileName = 255

// path is a container's link, named as upstream names it (cut to a legal
// file name).
func (d legacyLogs) path(pod, namespace, container, id string) string {
	name := fmt.Sprintf("%s_%s_%s-%s", pod, namespace, container, id)
	if limit := maxFileName - len(".log"); len(name) > limit {
		name = name[:limit]
	}
	return filepath.Join(string(d), name+".log")
}

// link links a started container's log, when the runtime has made it (a
// link to nothing would only be swept again).
func (d legacyLogs) link(target, pod, namespace, container, id string) {
	if d == "" {
		return
	}
	if _, err := os.Stat(target); os.IsNotExist(err) {
		return
	}
	if err := os.Symlink(target, d.path(pod, namespace, container, id)); err != nil {
		klog.ErrorS(err, "Failed to link a container's log where log shippers read it", "pod", klog.KRef(namespace, pod), "container", container, "containerID", id)
	}
}

// unlink removes a container's link, named from the labels of its status.
func (d legacyLogs) unlink(st *runtimeapi.ContainerStatus) error {
	if d == "" || st == nil {
		return nil
	}
	l := st.GetLabels()
	err := os.Remove(d.path(l[labelPodName], l[labelPodNamespace], l[LabelContainerName], st.GetId()))
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("removing the log link of container %s: %w", st.GetId(), err)
	}
	return nil
}

// sweep removes links whose log is gone, as upstream's container garbage
// collection does; a dangling link of a container still running is its
// log being rotated, and stays.
func (d legacyLogs) sweep(ctx context.Context, runtime RuntimeService) error {
	if d == "" {
		return nil
	}
	links, err := filepath.Glob(filepath.Join(string(d), "*.log"))
	if err != nil {
		return err
	}
	for _, link := range links {
		if _, err := os.Stat(link); !os.IsNotExist(err) {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(link), ".log")
		if i := strings.LastIndex(name, "-"); i >= 0 {
			resp, err := runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: name[i+1:]})
			if err == nil && resp.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
				continue
			}
			if err != nil && !crierr.IsNotFound(err) {
				continue // the runtime did not say; the next sweep will
			}
		}
		if err := os.Remove(link); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("removing a dangling log link: %w", err)
		}
	}
	return nil
}
