package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// MetricsServerBinary builds (or finds cached) metrics-server.
func MetricsServerBinary() (string, error) {
	out, err := exec.Command("bash", filepath.Join(RepoRoot(), "hack", "metrics-server", "build.sh")).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("building metrics-server: %v: %s", err, ee.Stderr)
		}
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// metricsServerObjects are what metrics-server's release manifest
// installs, but its Deployment: it runs here as a process on the host,
// which the Service's endpoints name, behind the aggregation layer.
const metricsServerObjects = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:metrics-server"}
rules:
- apiGroups: [""]
  resources: [nodes/metrics]
  verbs: [get]
- apiGroups: [""]
  resources: [pods, nodes]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:metrics-server"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:metrics-server"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:metrics-server"}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "metrics-server:system:auth-delegator"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:auth-delegator"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:metrics-server"}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: metrics-server-auth-reader, namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: extension-apiserver-authentication-reader}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:metrics-server"}]
---
apiVersion: v1
kind: Service
metadata: {name: metrics-server, namespace: kube-system}
spec:
  ports: [{name: https, port: 443, protocol: TCP, targetPort: %[2]d}]
---
apiVersion: v1
kind: Endpoints
metadata: {name: metrics-server, namespace: kube-system}
subsets:
- addresses: [{ip: %[1]s}]
  ports: [{name: https, port: %[2]d, protocol: TCP}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.metrics.k8s.io}
spec:
  group: metrics.k8s.io
  version: v1beta1
  groupPriorityMinimum: 100
  versionPriority: 100
  insecureSkipTLSVerify: true
  service: {name: metrics-server, namespace: kube-system, port: 443}
`

// StartMetricsServer runs metrics-server as its own identity
// (system:metrics-server, with the RBAC its manifest grants: nodes/metrics
// but not nodes/proxy), scraping the kubelets' /metrics/resource every
// 15 s, and registers it as the metrics.k8s.io API. It stops with the
// cluster.
func (c *Cluster) StartMetricsServer(ctx context.Context) error {
	bin, err := MetricsServerBinary()
	if err != nil {
		return err
	}
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	kubeconfig, err := c.Kubeconfig("metrics-server", "system:metrics-server")
	if err != nil {
		return err
	}
	objects := c.path("metrics-server.yaml")
	if err := os.WriteFile(objects, []byte(fmt.Sprintf(metricsServerObjects, hostIP(), ports[0])), 0o644); err != nil {
		return err
	}
	if out, err := c.Kubectl(ctx, "apply", "-f", objects); err != nil {
		return fmt.Errorf("metrics-server's objects: %w: %s", err, out)
	}
	return c.spawn("metrics-server", bin, "--secure-port", strconv.Itoa(ports[0]), "--bind-address", hostIP(),
		"--cert-dir", c.path("metrics-server-certs"), "--kubeconfig", kubeconfig,
		"--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig,
		"--kubelet-insecure-tls", "--kubelet-preferred-address-types", "InternalIP", "--kubelet-use-node-status-port",
		"--metric-resolution", "15s", "--kubelet-request-timeout", "10s")
}
