package volume

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// projections turns a configMap, secret, downwardAPI or projected volume
// into the list of its sources and its default file mode.
func projections(vol *v1.Volume) ([]v1.VolumeProjection, *int32, bool) {
	switch {
	case vol.Projected != nil:
		return vol.Projected.Sources, vol.Projected.DefaultMode, true
	case vol.ConfigMap != nil:
		s := vol.ConfigMap
		return []v1.VolumeProjection{{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: s.LocalObjectReference, Items: s.Items, Optional: s.Optional}}}, s.DefaultMode, true
	case vol.Secret != nil:
		s := vol.Secret
		return []v1.VolumeProjection{{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: s.SecretName}, Items: s.Items, Optional: s.Optional}}}, s.DefaultMode, true
	case vol.DownwardAPI != nil:
		return []v1.VolumeProjection{{DownwardAPI: &v1.DownwardAPIProjection{Items: vol.DownwardAPI.Items}}}, vol.DownwardAPI.DefaultMode, true
	}
	return nil, nil, false
}

// payload computes the files of a projected (or configMap, secret,
// downwardAPI) volume.
func (m *Manager) payload(ctx context.Context, pod *v1.Pod, sources []v1.VolumeProjection, defaultMode *int32) (map[string]File, error) {
	mode := os.FileMode(0o644)
	if defaultMode != nil {
		mode = os.FileMode(*defaultMode)
	}
	files := map[string]File{}
	group, user := fsGroup(pod), fsUser(pod)
	// owned adds a file: with an fsGroup it is the group's and readable
	// by it, whatever its mode.
	owned := func(path string, data []byte, itemMode *int32, uid int) error {
		if err := validPath(path); err != nil {
			return err
		}
		f := file(data, mode)
		if itemMode != nil {
			f.Mode = os.FileMode(*itemMode)
		}
		f.UID = uid
		if group != nil {
			f.GID, f.Mode = int(*group), f.Mode|groupRead
		}
		files[filepath.Clean(path)] = f
		return nil
	}
	add := func(path string, data []byte, itemMode *int32) error { return owned(path, data, itemMode, -1) }
	for _, src := range sources {
		var err error
		switch {
		case src.ServiceAccountToken != nil:
			var token string
			if token, err = m.tokens.get(ctx, m.o.Tokens, pod, src.ServiceAccountToken); err == nil {
				// A token is a credential: when the pod says who it runs
				// as, only that user (and its fsGroup) may read it.
				var tokenMode *int32
				if user != nil || group != nil {
					tokenMode = new(int32(0o600))
				}
				err = owned(src.ServiceAccountToken.Path, []byte(token), tokenMode, id(user))
			}
		case src.ConfigMap != nil:
			err = m.projectKeys(ctx, pod, "configmap", src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, add)
		case src.Secret != nil:
			err = m.projectKeys(ctx, pod, "secret", src.Secret.Name, src.Secret.Items, src.Secret.Optional, add)
		case src.DownwardAPI != nil:
			err = m.downwardAPI(pod, src.DownwardAPI.Items, add)
		}
		if err != nil {
			return nil, err
		}
	}
	return files, nil
}

func (m *Manager) downwardAPI(pod *v1.Pod, items []v1.DownwardAPIVolumeFile, add func(string, []byte, *int32) error) error {
	env := podutil.FieldEnv{NodeName: m.o.NodeName, HostIPs: m.o.HostIPs}
	for _, item := range items {
		var v string
		var err error
		switch {
		case item.FieldRef != nil:
			v, err = podutil.FieldRef(pod, item.FieldRef.FieldPath, env)
		case item.ResourceFieldRef != nil:
			v, err = podutil.ResourceFieldRef(pod, "", item.ResourceFieldRef, m.o.Allocatable())
		default:
			err = fmt.Errorf("downwardAPI item %q has neither fieldRef nor resourceFieldRef", item.Path)
		}
		if err == nil {
			err = add(item.Path, []byte(v), item.Mode)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// projectKeys adds the keys of a configMap or secret: the items listed,
// or every key when none are.
func (m *Manager) projectKeys(ctx context.Context, pod *v1.Pod, kind, name string, items []v1.KeyToPath, optional *bool, add func(string, []byte, *int32) error) error {
	data, err := m.objectData(ctx, pod.Namespace, kind, name)
	isOptional := optional != nil && *optional
	switch {
	case apierrors.IsNotFound(err) && isOptional:
		return nil
	case err != nil:
		return err
	}
	if len(items) == 0 {
		for k, v := range data {
			if err := add(k, v, nil); err != nil {
				return err
			}
		}
		return nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if isOptional {
				continue
			}
			return fmt.Errorf("%s %q has no key %q", kind, name, it.Key)
		}
		if err := add(it.Path, v, it.Mode); err != nil {
			return err
		}
	}
	return nil
}

// objectData reads a configMap's or secret's keys.
func (m *Manager) objectData(ctx context.Context, namespace, kind, name string) (map[string][]byte, error) {
	return ObjectData(ctx, m.o.Objects, namespace, kind, name)
}

// ObjectData reads the keys of a configMap ("configmap") or secret
// ("secret"), binary and text alike.
func ObjectData(ctx context.Context, objects Objects, namespace, kind, name string) (map[string][]byte, error) {
	data := map[string][]byte{}
	if kind == "secret" {
		s, err := objects.GetSecret(ctx, namespace, name)
		if err != nil {
			return nil, err
		}
		for k, v := range s.Data {
			data[k] = v
		}
		for k, v := range s.StringData {
			data[k] = []byte(v)
		}
		return data, nil
	}
	cm, err := objects.GetConfigMap(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return data, nil
}
