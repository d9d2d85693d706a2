//go:build integration

// Package devices tests what accelerator and latency-sensitive nodes
// need, in cluster mode against the real control plane and containerd
// 2.x (the first with CDI): a device plugin (upstream's sample device
// plugin), a DRA driver (upstream's DRA test driver), the static CPU and
// memory managers, and the pod-resources API that reports them.
package devices

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

var (
	cd *testbed.Containerd
	cl *testbed.Cluster
)

func TestMain(m *testing.M) {
	testbed.Main(m, &cd, func(context.Context) (func(), error) {
		// CDI devices (a device plugin's, every DRA device) reach
		// containers only on containerd 2.x.
		if !strings.HasPrefix(cd.Version, "2.") && !strings.HasPrefix(cd.Version, "v2.") {
			return nil, fmt.Errorf("the devices suite needs containerd 2.x for CDI (NODELET_TEST_CONTAINERD=2), not %s", cd.Version)
		}
		return nil, nil
	}, testbed.WithCluster(&cl, "nodelet-devices-"))
}

// pod is a pod of one sleeping container on node with the given
// resources as its requests and limits (Guaranteed when cpu and memory
// are among them).
func pod(name, node string, resources v1.ResourceList) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PodSpec{
			NodeName:                      node,
			AutomountServiceAccountToken:  new(false),
			TerminationGracePeriodSeconds: new(int64(1)),
			Containers: []v1.Container{{
				Name: "main", Image: testbed.BusyboxImage, Command: []string{"sleep", "3600"},
				ImagePullPolicy: v1.PullIfNotPresent,
				Resources:       v1.ResourceRequirements{Requests: resources, Limits: resources},
			}},
		},
	}
}

func quantities(kv ...string) v1.ResourceList {
	l := v1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

func create(t *testing.T, ns string, p *v1.Pod) {
	t.Helper()
	if _, err := cl.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// deletePod deletes a pod and waits until the API has none: nodelet saw
// its containers gone and the pod's status final.
func deletePod(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	if err := cl.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testbed.Eventually(t, time.Minute, func() (bool, string) {
		_, err := cl.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err != nil, fmt.Sprintf("pod %s still there", name)
	})
}

// execMain runs cmd in API pod ns/name's running main container and
// returns its output.
func execMain(t *testing.T, n *testbed.Nodelet, ns, name string, cmd ...string) string {
	t.Helper()
	c := n.RunningPodContainer(name, "main")
	if c == nil {
		t.Fatalf("pod %s/%s has no running main container", ns, name)
	}
	out, err := n.Exec(c.Id, cmd...)
	if err != nil {
		t.Fatalf("%v in %s: %v (%s)", cmd, name, err, out)
	}
	return strings.TrimSpace(out)
}

// podResources connects to node n's pod-resources API, as a monitoring
// agent does.
func podResources(t *testing.T, n *testbed.Nodelet) podresourcesapi.PodResourcesListerClient {
	t.Helper()
	// nodelet serves the socket a moment after it answers /healthz (and
	// again after a restart): each call waits for it, for at most 30 s.
	conn, err := grpc.NewClient("unix://"+filepath.Join(n.RootDir, "pod-resources", "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.WaitForReady(true)),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			return invoker(ctx, method, req, reply, cc, opts...)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return podresourcesapi.NewPodResourcesListerClient(conn)
}

// containerResources is what List says pod ns/name's main container
// holds, nil when List does not have the pod.
func containerResources(t *testing.T, c podresourcesapi.PodResourcesListerClient, ns, name string) *podresourcesapi.ContainerResources {
	t.Helper()
	resp, err := c.List(context.Background(), &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		t.Fatalf("pod-resources List: %v", err)
	}
	for _, p := range resp.PodResources {
		if p.Namespace == ns && p.Name == name {
			for _, ctr := range p.Containers {
				if ctr.Name == "main" {
					return ctr
				}
			}
		}
	}
	return nil
}

// containerStatus is the API's status of a pod's main container.
func containerStatus(t *testing.T, ns, name string) v1.ContainerStatus {
	t.Helper()
	p, err := cl.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ContainerStatuses) != 1 {
		t.Fatalf("pod %s: container statuses %+v", name, p.Status.ContainerStatuses)
	}
	return p.Status.ContainerStatuses[0]
}
