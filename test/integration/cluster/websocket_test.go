//go:build integration

package cluster

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodelet/nodelet/internal/testbed"
)

// Container logs reach WebSocket clients through the API server: from
// pods/log, following (the API server frames the stream nodelet sends),
// and from the node proxy to nodelet's containerLogs (nodelet frames it),
// in base64 and binary frames. Exec, attach and port-forward over
// WebSockets are what kubectl uses: TestKubectlLogsExecAttachPortForward
// covers them.
func TestLogsOverWebSockets(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-ws", cd, "")
	waitNodeReady(t, n.NodeName, 10*time.Second)
	pod := busyboxPod("chatty", n.NodeName, "sh", "-c", "echo first line; echo second line; exec sleep 3600")
	if _, err := cl.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, 30*time.Second, ns, "chatty", running)

	cfg, err := clientcmd.BuildConfigFromFlags("", cl.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(cfg.Host, "https://")
	paths := map[string]string{
		// As the e2e framework's conformance spec opens it.
		"pods/log":              fmt.Sprintf("/api/v1/namespaces/%s/pods/chatty/log?container=main", ns),
		"pods/log, following":   fmt.Sprintf("/api/v1/namespaces/%s/pods/chatty/log?follow=true", ns),
		"node proxy":            fmt.Sprintf("/api/v1/nodes/%s/proxy/containerLogs/%s/chatty/main", n.NodeName, ns),
		"node proxy, following": fmt.Sprintf("/api/v1/nodes/%s/proxy/containerLogs/%s/chatty/main?follow=true", n.NodeName, ns),
	}
	want := "first line\nsecond line\n"
	for via, path := range paths {
		for _, protocol := range []string{"base64.binary.k8s.io", "binary.k8s.io"} {
			// The log is written as the container starts: read until it
			// is all there.
			testbed.Eventually(t, 20*time.Second, func() (bool, string) {
				got, err := readWebSocket("wss://"+host+path, "https://"+host, protocol, tlsCfg, len(want))
				return err == nil && got == want, fmt.Sprintf("%s %s: got %q (err %v), want %q", via, protocol, got, err, want)
			})
		}
	}
}

// readWebSocket reads a log stream to its end, or (a following one)
// until it has n bytes, decoding base64 frames.
func readWebSocket(url, origin, protocol string, tlsCfg *tls.Config, n int) (string, error) {
	cfg, err := websocket.NewConfig(url, origin)
	if err != nil {
		return "", err
	}
	cfg.Protocol, cfg.TlsConfig = []string{protocol}, tlsCfg
	conn, err := websocket.DialConfig(cfg)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return "", err
	}
	var out []byte
	for {
		var frame []byte
		if err := websocket.Message.Receive(conn, &frame); err != nil {
			if len(out) == 0 && err.Error() != "EOF" {
				return "", fmt.Errorf("first frame: %w", err)
			}
			break // the server closes the stream at the log's end
		}
		if protocol == "base64.binary.k8s.io" {
			b, err := base64.StdEncoding.DecodeString(string(frame))
			if err != nil {
				return "", fmt.Errorf("frame %q: %w", frame, err)
			}
			frame = b
		}
		out = append(out, frame...)
		if len(out) >= n {
			break
		}
	}
	return string(out), nil
}
