// Package volume is nodelet's volume manager: it sets up a pod's volumes
// before its containers are created (SyncPod's WaitForAttachAndMount) and
// tears them down once nothing of the pod runs (SyncTerminatedPod's
// WaitForUnmount).
//
// Each volume lives under <root>/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>,
// the layout upstream uses, so tools that look there find them. The
// desired state of a pod is its spec's volumes; the actual state is
// what the manager has set up, kept per pod so container mounts resolve
// only to volumes that are ready. Volumes whose content nodelet writes
// (configMap, secret, downwardAPI, projected) are rewritten at every
// sync of the pod, through an atomic ..data symlink swap, so a running
// pod sees its configMaps, secrets, labels and tokens change without a
// restart and never a half-written set of files. Secrets and projected
// volumes sit on a tmpfs, so their content never touches the disk;
// emptyDir with medium Memory is a tmpfs of sizeLimit.
//
//	spec.volumes ──WaitForAttachAndMount──▶ set up (actual state) ──HostPath──▶ container mounts
//	                       ▲ every sync: content refreshed
//	pod terminated ──WaitForUnmount──▶ tmpfs unmounted, directories removed, state forgotten
package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/cluster/standalone"
	"github.com/nodelet/nodelet/pkg/observe/instrument"
	"github.com/nodelet/nodelet/pkg/pods/poddirs"
)

// Objects reads the configMaps and secrets pods refer to.
type Objects interface {
	GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error)
	GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)
}

// Tokens issues service account tokens bound to pods.
type Tokens interface {
	CreateToken(ctx context.Context, namespace, serviceAccount string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)
}

// Options configure a Manager.
type Options struct {
	RootDir  string
	NodeName string
	HostIPs  []string
	// Objects and Tokens are nil without an API server (standalone.API
	// stands in): volumes that need them then fail with a clear error.
	Objects Objects
	Tokens  Tokens
	// Claims resolves persistent volume claims; nil (standalone.API)
	// without an API server.
	Claims Claims
	// Node is the node as nodelet knows it, for persistent volumes' node
	// affinity; nil knows none.
	Node func() *v1.Node
	// CSI publishes CSI volumes; nil refuses them.
	CSI CSIVolumes
	// Allocatable is the node's allocatable resources, the value of a
	// resourceFieldRef to a limit the container does not set.
	Allocatable func() v1.ResourceList
	Recorder    record.EventRecorder
	Clock       clock.Clock
	// ImageVolumes says why the runtime cannot mount image volumes, or
	// nil when it can; nil means it can.
	ImageVolumes func() error
	// Steps records each volume's first set-up, and each failure, in the
	// pod's timeline; nil records nothing.
	Steps instrument.StepRecorder
}

// ErrStaticPodAPIObject is returned for a static pod that refers to API
// objects: it exists before, and without, any API server.
var ErrStaticPodAPIObject = errors.New("static pods may not refer to API objects")

// Manager sets up and tears down pods' volumes.
type Manager struct {
	o      Options
	tokens *tokenCache

	mu sync.Mutex
	// mounted is the actual state: per pod, each set-up volume's host path.
	mounted map[types.UID]map[string]string
}

// NewManager returns a volume manager.
func NewManager(o Options) *Manager {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Recorder == nil {
		o.Recorder = &record.FakeRecorder{}
	}
	if o.Objects == nil {
		o.Objects = standalone.API{}
	}
	if o.Tokens == nil {
		o.Tokens = standalone.API{}
	}
	if o.Claims == nil {
		o.Claims = standalone.API{}
	}
	if o.Node == nil {
		o.Node = func() *v1.Node { return nil }
	}
	if o.CSI == nil {
		o.CSI = noCSI{}
	}
	if o.Allocatable == nil {
		o.Allocatable = func() v1.ResourceList { return nil }
	}
	if o.Steps == nil {
		o.Steps = instrument.NoSteps{}
	}
	return &Manager{o: o, tokens: newTokenCache(o.Clock), mounted: map[types.UID]map[string]string{}}
}

// Dir is where a volume's files live: volumes/kubernetes.io~<plugin>/<name>.
func (m *Manager) Dir(uid types.UID, plugin, name string) string {
	return poddirs.Root(m.o.RootDir).Volume(uid, plugin, name)
}

// WaitForAttachAndMount sets up every volume of the pod, or refreshes its
// content if it is set up already. Each volume that fails gets a
// FailedMount event naming it; the error names them all, and the pod
// worker retries the sync.
func (m *Manager) WaitForAttachAndMount(ctx context.Context, pod *v1.Pod) error {
	var failed []string
	var errs []error
	ready := map[string]string{}
	m.mu.Lock()
	before := m.mounted[pod.UID]
	m.mu.Unlock()
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		_, refresh := before[vol.Name]
		end := m.o.Steps.Begin(pod, instrument.KindVolume, vol.Name)
		path, err := m.setUp(ctx, pod, vol)
		if !refresh || err != nil {
			// A refresh that works is not a step of the pod's life.
			end(err, "")
		}
		if err == nil {
			ready[vol.Name] = path
			continue
		}
		m.o.Recorder.Eventf(pod, v1.EventTypeWarning, "FailedMount", "MountVolume.SetUp failed for volume %q : %v", vol.Name, err)
		klog.V(2).InfoS("Volume set-up failed", "pod", klog.KObj(pod), "podUID", pod.UID, "volume", vol.Name, "err", err)
		if old, ok := before[vol.Name]; ok {
			// Set up before: only the refresh failed (its configMap was
			// deleted, say). The pod keeps the last content, as upstream's.
			ready[vol.Name] = old
			continue
		}
		failed = append(failed, vol.Name)
		errs = append(errs, fmt.Errorf("volume %q: %w", vol.Name, err))
	}
	m.mu.Lock()
	m.mounted[pod.UID] = ready
	m.mu.Unlock()
	if len(errs) > 0 {
		sort.Strings(failed)
		return fmt.Errorf("unmounted volumes=[%s]: %w", strings.Join(failed, " "), errors.Join(errs...))
	}
	return nil
}

// HostPath returns the host directory (or file) of a volume that is set
// up, for a container mount.
func (m *Manager) HostPath(uid types.UID, name string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.mounted[uid][name]
	return p, ok
}

// WaitForUnmount tears down the pod's volumes: tmpfs mounts are
// unmounted and the volume directories removed. Host paths are the
// node's and are left alone.
func (m *Manager) WaitForUnmount(ctx context.Context, pod *v1.Pod) error {
	if err := m.TearDown(pod.UID); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.mounted, pod.UID)
	m.mu.Unlock()
	return nil
}

// TearDown unmounts and removes the volumes of a pod by UID, knowing
// nothing of its spec: housekeeping uses it for pods nodelet has
// forgotten (after a restart, say).
func (m *Manager) TearDown(uid types.UID) error {
	// CSI volumes first, by their drivers: the directory must not go
	// while a driver may still have a volume published in it.
	if err := m.o.CSI.TearDown(context.Background(), uid); err != nil {
		return fmt.Errorf("tearing down the CSI volumes of pod %s: %w", uid, err)
	}
	// subPath binds first: they hold parts of the volumes.
	subpaths := poddirs.Root(m.o.RootDir).VolumeSubpaths(uid)
	if err := unmountUnder(subpaths); err != nil {
		return fmt.Errorf("unmounting the subPaths of pod %s: %w", uid, err)
	}
	if err := os.RemoveAll(subpaths); err != nil {
		return fmt.Errorf("unmounting the subPaths of pod %s: %w", uid, err)
	}
	dir := poddirs.Root(m.o.RootDir).Volumes(uid)
	if err := unmountUnder(dir); err != nil {
		return fmt.Errorf("tearing down the volumes of pod %s: %w", uid, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("tearing down the volumes of pod %s: %w", uid, err)
	}
	m.tokens.forget(uid)
	return nil
}

func (m *Manager) setUp(ctx context.Context, pod *v1.Pod, vol *v1.Volume) (string, error) {
	if err := m.unservable(pod, vol); err != nil {
		return "", err
	}
	if sources, mode, ok := projections(vol); ok {
		plugin, onTmpfs := "projected", true
		switch {
		case vol.ConfigMap != nil:
			plugin, onTmpfs = "configmap", false
		case vol.Secret != nil:
			plugin = "secret"
		case vol.DownwardAPI != nil:
			plugin, onTmpfs = "downward-api", false
		}
		files, err := m.payload(ctx, pod, sources, mode)
		if err != nil {
			return "", err
		}
		dir := m.Dir(pod.UID, plugin, vol.Name)
		if onTmpfs {
			if err := mountTmpfs(dir, 0o755, nil); err != nil {
				return "", err
			}
		}
		changed, err := writeFiles(dir, files)
		if err != nil {
			return "", fmt.Errorf("writing the volume's files: %w", err)
		}
		if changed {
			klog.V(3).InfoS("Volume content written", "pod", klog.KObj(pod), "podUID", pod.UID, "volume", vol.Name, "files", len(files))
		}
		return dir, nil
	}
	if name := claimName(pod, vol); name != "" {
		return m.claim(ctx, pod, vol, name)
	}
	switch {
	case vol.CSI != nil:
		if p, ok := m.HostPath(pod.UID, vol.Name); ok {
			return p, nil
		}
		return m.o.CSI.SetUpInline(ctx, pod, vol)
	case vol.HostPath != nil:
		return vol.HostPath.Path, checkHostPath(vol.HostPath)
	case vol.EmptyDir != nil:
		dir := m.Dir(pod.UID, "empty-dir", vol.Name)
		// A tmpfs's root is 1777, as the kernel makes it without a mode
		// and upstream mounts it: sticky, so a user of the pod cannot
		// remove another's files (and a subPath created there inherits
		// the mode: upstream's "nonexistent volume subPath" spec).
		perm := os.FileMode(0o777)
		if vol.EmptyDir.Medium == v1.StorageMediumMemory {
			perm |= os.ModeSticky
			if err := mountTmpfs(dir, perm, vol.EmptyDir.SizeLimit); err != nil {
				return "", err
			}
		} else if strings.HasPrefix(string(vol.EmptyDir.Medium), string(v1.StorageMediumHugePages)) {
			size, err := hugePageSize(vol.EmptyDir.Medium, pod)
			if err != nil {
				return "", err
			}
			if err := mountHugetlbfs(dir, size); err != nil {
				return "", err
			}
		} else if err := os.MkdirAll(dir, 0o777); err != nil {
			return "", err
		}
		return dir, emptyDirOwnership(dir, perm, fsGroup(pod))
	}
	// An image: the runtime mounts it itself (CRI Mount.image), and there
	// is nothing on the host to set up. unservable refused every other
	// kind.
	return "", nil
}

// emptyDirOwnership lets any user of the pod write to an emptyDir, umask
// or not; with an fsGroup the directory is the group's and setgid, so
// what containers create there is the group's too. Only the root is
// checked and changed (upstream's OnRootMismatch): what containers wrote
// is theirs.
func emptyDirOwnership(dir string, perm os.FileMode, group *int64) error {
	info, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	want := os.ModeDir | perm
	if group != nil {
		want |= os.ModeSetgid
	}
	_, gid := owner(info)
	if info.Mode() == want && (group == nil || gid == int(*group)) {
		return nil
	}
	if err := os.Chmod(dir, perm); err != nil {
		return err
	}
	return ownedBy(dir, -1, id(group), groupReadWrite)
}

// apiReference names the first API object among sources, "" for none.
func apiReference(sources []v1.VolumeProjection) string {
	for _, s := range sources {
		switch {
		case s.ConfigMap != nil:
			return fmt.Sprintf("configMap %q", s.ConfigMap.Name)
		case s.Secret != nil:
			return fmt.Sprintf("secret %q", s.Secret.Name)
		case s.ServiceAccountToken != nil:
			return "a service account token"
		}
	}
	return ""
}

// checkHostPath enforces a hostPath volume's type, creating what the
// *OrCreate types allow. A relative path passes the API server's
// validation (and so a static pod's) but names nothing on the host: it is
// refused here, never resolved against nodelet's working directory.
func checkHostPath(h *v1.HostPathVolumeSource) error {
	if !filepath.IsAbs(h.Path) {
		return fmt.Errorf("hostPath %q is not an absolute path", h.Path)
	}
	t := v1.HostPathUnset
	if h.Type != nil {
		t = *h.Type
	}
	fi, err := os.Stat(h.Path)
	exists := err == nil
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("hostPath type check failed: %w", err)
	}
	want := func(ok bool, what string) error {
		if !exists {
			return fmt.Errorf("hostPath type check failed: %s does not exist", h.Path)
		}
		if !ok {
			return fmt.Errorf("hostPath type check failed: %s is not a %s", h.Path, what)
		}
		return nil
	}
	switch t {
	case v1.HostPathUnset:
		return nil
	case v1.HostPathDirectoryOrCreate:
		if !exists {
			return os.MkdirAll(h.Path, 0o755)
		}
		return want(fi.IsDir(), "directory")
	case v1.HostPathDirectory:
		return want(exists && fi.IsDir(), "directory")
	case v1.HostPathFileOrCreate:
		if !exists {
			f, err := os.OpenFile(h.Path, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return fmt.Errorf("hostPath type check failed: creating %s: %w", h.Path, err)
			}
			return f.Close()
		}
		return want(fi.Mode().IsRegular(), "file")
	case v1.HostPathFile:
		return want(exists && fi.Mode().IsRegular(), "file")
	case v1.HostPathSocket:
		return want(exists && fi.Mode()&os.ModeSocket != 0, "socket")
	case v1.HostPathCharDev:
		return want(exists && fi.Mode()&os.ModeCharDevice != 0, "character device")
	case v1.HostPathBlockDev:
		return want(exists && fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0, "block device")
	}
	return fmt.Errorf("hostPath type %q is not supported", t)
}
