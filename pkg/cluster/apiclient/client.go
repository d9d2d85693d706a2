// Package apiclient is the one way nodelet reads the API objects its pods
// refer to, and writes their mirror pods: the secrets, configMaps and
// services (watched while a pod refers to them), and the claims, volumes,
// CSI drivers, attachments and service account tokens (read when a
// volume is set up). kubeclient below it is the wire; each consumer
// declares the part it reads as an interface of its own, and the journal
// wraps some of them to read through an outage. On a node without an API
// server, standalone.API answers instead.
package apiclient

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/cluster/kubeclient"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// Client is what the node does with the API server for its pods: mirror
// pods, and reading the objects pods refer to (each consumer declares the
// part it uses). Its secrets and configMaps come from watches (watched.go),
// which run until Run ends.
type Client struct {
	*watches
	client   kubeclient.Interface
	nodeName string
}

// Options are what the client depends on.
type Options struct {
	Client   kubeclient.Interface
	NodeName string
	// OnChange receives the pods referring to a watched object that
	// changed; nil tells nobody.
	OnChange func([]types.UID)
}

// New returns the node's API client.
func New(o Options) *Client {
	return &Client{watches: newWatches(o.Client, o.OnChange), client: o.Client, nodeName: o.NodeName}
}

// CreateMirrorPod creates the mirror of a static pod: the same pod with
// the mirror annotation set to the manifest's hash (so an outdated mirror
// is recognised) and owned by the node (so it goes with the node).
func (c *Client) CreateMirrorPod(ctx context.Context, pod *v1.Pod) error {
	node, err := c.node(ctx)
	if err != nil {
		return fmt.Errorf("creating mirror pod: %w", err)
	}
	if node.DeletionTimestamp != nil {
		// The mirror is owned by the node: created now, it would only be
		// collected with it (upstream does not create it either).
		klog.V(4).InfoS("Not creating a mirror pod: the node is being deleted", "pod", klog.KObj(pod), "podUID", pod.UID, "node", c.nodeName)
		return nil
	}
	nodeUID := node.UID
	hash, ok := pod.Annotations[podutil.ConfigHashAnnotationKey]
	if !ok {
		return fmt.Errorf("creating mirror pod of %s: the static pod has no %s annotation", podutil.FullName(pod), podutil.ConfigHashAnnotationKey)
	}
	mirror := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace, Labels: pod.Labels, Annotations: map[string]string{},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: c.nodeName, UID: nodeUID, Controller: new(true),
			}},
		},
		Spec: *pod.Spec.DeepCopy(),
	}
	for k, v := range pod.Annotations {
		mirror.Annotations[k] = v
	}
	mirror.Annotations[podutil.ConfigMirrorAnnotationKey] = hash
	_, err = c.client.CoreV1().Pods(pod.Namespace).Create(ctx, mirror, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// The next sync compares the existing one with the static pod.
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating mirror pod %s: %w", podutil.FullName(pod), err)
	}
	klog.V(2).InfoS("Created mirror pod", "pod", klog.KObj(pod), "podUID", pod.UID)
	return nil
}

// DeleteMirrorPod deletes a mirror pod at once: it runs nothing itself.
func (c *Client) DeleteMirrorPod(ctx context.Context, fullName string, uid *types.UID) (bool, error) {
	name, ns, err := podutil.ParseFullName(fullName)
	if err != nil {
		return false, err
	}
	opts := metav1.DeleteOptions{GracePeriodSeconds: new(int64)}
	if uid != nil {
		opts.Preconditions = &metav1.Preconditions{UID: uid}
	}
	err = c.client.CoreV1().Pods(ns).Delete(ctx, name, opts)
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// Gone already, or replaced by another instance.
		return false, nil
	case err != nil:
		return false, fmt.Errorf("deleting mirror pod %s: %w", fullName, err)
	}
	klog.V(2).InfoS("Deleted mirror pod", "pod", klog.KRef(ns, name))
	return true, nil
}

// node reads the node afresh: a mirror pod is created rarely, and must
// not be when the node is going away.
func (c *Client) node(ctx context.Context) (*v1.Node, error) {
	node, err := c.client.CoreV1().Nodes().Get(ctx, c.nodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("node %s not registered: %w", c.nodeName, err)
	}
	return node, nil
}

// GetPersistentVolumeClaim reads a claim a pod mounts.
func (c *Client) GetPersistentVolumeClaim(ctx context.Context, namespace, name string) (*v1.PersistentVolumeClaim, error) {
	return c.client.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, name, metav1.GetOptions{})
}

// GetPersistentVolume reads the volume bound to a pod's claim.
func (c *Client) GetPersistentVolume(ctx context.Context, name string) (*v1.PersistentVolume, error) {
	return c.client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
}

// VolumesAttached reads the volumes the attach/detach controller reports
// attached to the node (node.status.volumesAttached).
func (c *Client) VolumesAttached(ctx context.Context) ([]v1.AttachedVolume, error) {
	node, err := c.node(ctx)
	if err != nil {
		return nil, err
	}
	return node.Status.VolumesAttached, nil
}

// GetCSIDriver reads a CSI driver's settings.
func (c *Client) GetCSIDriver(ctx context.Context, name string) (*storagev1.CSIDriver, error) {
	return c.client.StorageV1().CSIDrivers().Get(ctx, name, metav1.GetOptions{})
}

// GetVolumeAttachment reads whether a volume is attached to the node.
func (c *Client) GetVolumeAttachment(ctx context.Context, name string) (*storagev1.VolumeAttachment, error) {
	return c.client.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
}

// CreateToken requests a token for a service account, bound to a pod.
func (c *Client) CreateToken(ctx context.Context, namespace, serviceAccount string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	return c.client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, serviceAccount, req, metav1.CreateOptions{})
}
