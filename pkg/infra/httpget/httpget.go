// Package httpget sends the HTTP GET of a probe or a lifecycle hook
// (v1.HTTPGetAction). Both are built and sent the same way, as upstream's
// are: the same URL, headers and Host override, the same client that
// skips certificate checks and follows redirects only within the host.
package httpget

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ResolvePort turns a port given by number or by name (one of the
// container's ports, else a number in a string) into a number.
func ResolvePort(p intstr.IntOrString, c *v1.Container) (int, error) {
	if p.Type == intstr.Int {
		if p.IntVal <= 0 || p.IntVal > 65535 {
			return 0, fmt.Errorf("invalid port %d", p.IntVal)
		}
		return int(p.IntVal), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil && n > 0 && n <= 65535 {
		return n, nil
	}
	return 0, fmt.Errorf("container %q has no port named %q", c.Name, p.StrVal)
}

// NewRequest builds the GET: to the action's host, or podIP when it names
// none; a Host header sets the request's host; User-Agent (userAgent) and
// Accept (*/*) are set unless the action sets them.
func NewRequest(ctx context.Context, g *v1.HTTPGetAction, c *v1.Container, podIP, userAgent string) (*http.Request, error) {
	host := g.Host
	if host == "" {
		host = podIP
	}
	port, err := ResolvePort(g.Port, c)
	if err != nil {
		return nil, err
	}
	scheme := strings.ToLower(string(g.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	u := &url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(port))}
	path := g.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	u.Path, u.RawQuery, _ = strings.Cut(path, "?")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	for _, h := range g.HTTPHeaders {
		if strings.EqualFold(h.Name, "Host") {
			req.Host = h.Value
			continue
		}
		req.Header.Add(h.Name, h.Value)
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", userAgent)
	}
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "*/*")
	}
	return req, nil
}

// NewClient is the client probes and hooks use. It must never carry
// credentials: requests go wherever the pod spec says.
func NewClient() *http.Client {
	return &http.Client{
		// Probes and hooks talk to the container, not check its certificate.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true},
		// Redirects are followed only within the same host; a redirect
		// elsewhere means the container answered, which is a success.
		CheckRedirect: func(r *http.Request, via []*http.Request) error {
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			if r.URL.Hostname() != via[0].URL.Hostname() {
				return http.ErrUseLastResponse
			}
			return nil
		},
	}
}

// Success is the status codes counted as success: 2xx and 3xx.
func Success(code int) bool { return code >= 200 && code < 400 }
