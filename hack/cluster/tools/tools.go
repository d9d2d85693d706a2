//go:build tools

// Package tools pins the upstream binaries hack/cluster builds: the control
// plane, kubectl, the kubelet the interoperability tests run, and the
// reference peers of the device tests: the sample device plugin and the
// DRA test driver; and upstream's node e2e suite (test/e2e_node, built
// with go test -c by hack/nodeconformance/build.sh), the ginkgo CLI that
// runs it in parallel, and the test images' programs built from source
// (agnhost, nonewprivs' nnp).
package tools

import (
	_ "github.com/onsi/ginkgo/v2/ginkgo"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/test/e2e/dra/test-driver"
	_ "k8s.io/kubernetes/test/e2e_node"
	_ "k8s.io/kubernetes/test/images/agnhost"
	_ "k8s.io/kubernetes/test/images/nonewprivs"
	_ "k8s.io/kubernetes/test/images/sample-device-plugin"
)
