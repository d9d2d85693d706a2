package csi

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/nodelet/nodelet/pkg/cluster/kubeclient"
)

// NodeIDAnnotation maps each registered driver to its node ID on the
// Node, as upstream keeps it beside the CSINode object.
const NodeIDAnnotation = "csi.volume.kubernetes.io/nodeid"

// APINodes keeps the CSINode object and the Node's labels and node ID
// annotation for the registered drivers.
type APINodes struct {
	Client   kubeclient.Interface
	NodeName string
}

// SetDriver records a driver: its CSINode entry (node ID, topology keys,
// volume limit), its topology labels and node ID on the Node.
func (a APINodes) SetDriver(ctx context.Context, d DriverInfo) error {
	if err := a.updateNode(ctx, func(n *v1.Node) {
		ids := nodeIDs(n)
		ids[d.Name] = d.NodeID
		setNodeIDs(n, ids)
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		for k, v := range d.Topology {
			n.Labels[k] = v
		}
	}); err != nil {
		return err
	}
	entry := storagev1.CSINodeDriver{Name: d.Name, NodeID: d.NodeID}
	for k := range d.Topology {
		entry.TopologyKeys = append(entry.TopologyKeys, k)
	}
	sort.Strings(entry.TopologyKeys)
	if d.MaxVolumes > 0 {
		entry.Allocatable = &storagev1.VolumeNodeResources{Count: new(int32(d.MaxVolumes))}
	}
	return a.updateCSINode(ctx, func(drivers []storagev1.CSINodeDriver) []storagev1.CSINodeDriver {
		return append(without(drivers, d.Name), entry)
	})
}

// RemoveDriver takes a driver out of the CSINode object and the Node's
// node ID annotation (its topology labels stay, as upstream's do).
func (a APINodes) RemoveDriver(ctx context.Context, name string) error {
	if err := a.updateNode(ctx, func(n *v1.Node) {
		ids := nodeIDs(n)
		delete(ids, name)
		setNodeIDs(n, ids)
	}); err != nil {
		return err
	}
	return a.updateCSINode(ctx, func(drivers []storagev1.CSINodeDriver) []storagev1.CSINodeDriver { return without(drivers, name) })
}

func (a APINodes) updateNode(ctx context.Context, change func(*v1.Node)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := a.Client.CoreV1().Nodes().Get(ctx, a.NodeName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading node %s: %w", a.NodeName, err)
		}
		change(n)
		_, err = a.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// updateCSINode changes the drivers of the node's CSINode object, making
// it (owned by the Node, so it goes with it) if there is none.
func (a APINodes) updateCSINode(ctx context.Context, change func([]storagev1.CSINodeDriver) []storagev1.CSINodeDriver) error {
	csinodes := a.Client.StorageV1().CSINodes()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cn, err := csinodes.Get(ctx, a.NodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			node, err := a.Client.CoreV1().Nodes().Get(ctx, a.NodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cn = &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: a.NodeName, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}}}
			cn.Spec.Drivers = change(nil)
			_, err = csinodes.Create(ctx, cn, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		cn.Spec.Drivers = change(cn.Spec.Drivers)
		_, err = csinodes.Update(ctx, cn, metav1.UpdateOptions{})
		return err
	})
}

func without(drivers []storagev1.CSINodeDriver, name string) []storagev1.CSINodeDriver {
	out := make([]storagev1.CSINodeDriver, 0, len(drivers))
	for _, d := range drivers {
		if d.Name != name {
			out = append(out, d)
		}
	}
	return out
}

func nodeIDs(n *v1.Node) map[string]string {
	ids := map[string]string{}
	if s := n.Annotations[NodeIDAnnotation]; s != "" {
		_ = json.Unmarshal([]byte(s), &ids) // a malformed value is replaced
	}
	return ids
}

func setNodeIDs(n *v1.Node, ids map[string]string) {
	if len(ids) == 0 {
		delete(n.Annotations, NodeIDAnnotation)
		return
	}
	b, _ := json.Marshal(ids)
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[NodeIDAnnotation] = string(b)
}
