package app

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// Version is nodelet's version as the node reports it (nodeInfo's
// kubeletVersion): the Kubernetes release whose kubelet it replaces.
const Version = "v1.37.2-nodelet"

// apiClients builds the API clients from the kubeconfig: one for
// everything but events, rate-limited by kubeAPIQPS/kubeAPIBurst, and one
// for events, rate-limited by eventRecordQPS/eventBurst, so a burst of
// events never delays a status update.
func apiClients(kubeconfig string, c *kubeletv1beta1.KubeletConfiguration) (client, events kubernetes.Interface, err error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.UserAgent = "nodelet/" + Version
	cfg.ContentType = c.ContentType
	cfg.QPS, cfg.Burst = float32(*c.KubeAPIQPS), int(c.KubeAPIBurst)
	if client, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	ecfg := *cfg
	ecfg.QPS, ecfg.Burst = float32(*c.EventRecordQPS), int(c.EventBurst)
	if events, err = kubernetes.NewForConfig(&ecfg); err != nil {
		return nil, nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	return client, events, nil
}
