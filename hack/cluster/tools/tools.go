//go:build tools

// Package tools pins the upstream binaries hack/cluster builds: the control
// plane, kubectl, the kubelet the interoperability tests run, and the
// reference peers of the device tests: the sample device plugin and the
// DRA test driver.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/test/e2e/dra/test-driver"
	_ "k8s.io/kubernetes/test/images/sample-device-plugin"
)
