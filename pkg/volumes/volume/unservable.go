package volume

import (
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/cluster/standalone"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// errUnsupportedProjection is a projection nodelet does not serve.
var errUnsupportedProjection = errors.New("clusterTrustBundle and podCertificate projections are not supported")

// Unservable returns the error the set-up of the pod's volumes fails with
// on this node whatever the API server, the disks and the drivers do: a
// static pod's reference to an API object, an API object without an API
// server, an image volume on a runtime that cannot mount images, a kind
// nodelet does not serve. It returns nil when only a set-up can tell.
// Every set-up asks it first, so the two never disagree.
//
// The pod syncer creates a first sandbox beside the volumes' set-up only
// when this is nil: a pod that can never run gets no sandbox, as
// upstream's does not.
func (m *Manager) Unservable(pod *v1.Pod) error {
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		if err := m.unservable(pod, vol); err != nil {
			return fmt.Errorf("volume %q: %w", vol.Name, err)
		}
	}
	return nil
}

func (m *Manager) unservable(pod *v1.Pod, vol *v1.Volume) error {
	static := podutil.IsStatic(pod)
	noAPI := standalone.IsAPI(m.o.Objects)
	if sources, _, ok := projections(vol); ok {
		for _, s := range sources {
			if s.ClusterTrustBundle != nil || s.PodCertificate != nil {
				return errUnsupportedProjection
			}
		}
		switch ref := apiReference(sources); {
		case ref != "" && static:
			return fmt.Errorf("%w (%s)", ErrStaticPodAPIObject, ref)
		case ref != "" && noAPI:
			return fmt.Errorf("%s: %w", ref, standalone.ErrNoAPIServer)
		}
		return nil
	}
	if name := claimName(pod, vol); name != "" {
		noClaims := standalone.IsAPI(m.o.Claims)
		switch {
		case static:
			return fmt.Errorf("%w (persistentvolumeclaim %q)", ErrStaticPodAPIObject, name)
		case noClaims:
			return fmt.Errorf("persistentvolumeclaim %q: %w", name, standalone.ErrNoAPIServer)
		}
		return nil
	}
	switch {
	case vol.CSI != nil:
		if static {
			return fmt.Errorf("%w (CSI volume %q)", ErrStaticPodAPIObject, vol.Name)
		}
		if _, none := m.o.CSI.(noCSI); none {
			return fmt.Errorf("%w: CSI volumes need an API server", ErrUnsupportedVolume)
		}
	case vol.Image != nil:
		if m.o.ImageVolumes != nil {
			return m.o.ImageVolumes()
		}
	case vol.HostPath == nil && vol.EmptyDir == nil:
		return fmt.Errorf("%w (hostPath, emptyDir, configMap, secret, downwardAPI, projected, image, csi, persistentVolumeClaim and ephemeral are)", ErrUnsupportedVolume)
	}
	return nil
}
