package podsources

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/infra/periodic"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// httpTimeout bounds one poll of the manifest URL.
const httpTimeout = 10 * time.Second

// HTTPSource polls a URL serving one Pod or a PodList. A body that does
// not change sends nothing; an unreachable server, an error status or a
// body that does not decode to valid pods is logged and the last good set
// stays in force: pods are never removed because the server blinked. An
// empty body is a valid, empty set.
type HTTPSource struct {
	url      string
	header   http.Header
	static   Static
	period   time.Duration
	out      Setter
	recorder record.EventRecorder
	clock    clock.WithTicker
	client   *http.Client
	nodeRef  *v1.ObjectReference

	// last is the last body received, good or bad, so an unchanged body
	// is neither decoded nor reported again.
	last      []byte
	delivered bool
	lastErr   string
}

// NewHTTPSource returns a source polling url every period.
func NewHTTPSource(url string, header http.Header, static Static, period time.Duration, out Setter, recorder record.EventRecorder, clk clock.WithTicker) *HTTPSource {
	return &HTTPSource{
		url: url, header: header, static: static, period: period, out: out, recorder: recorder, clock: clk,
		client:  &http.Client{Timeout: httpTimeout},
		nodeRef: &v1.ObjectReference{Kind: "Node", Name: static.NodeName, APIVersion: "v1"},
	}
}

// Run polls until ctx ends.
func (s *HTTPSource) Run(ctx context.Context) {
	klog.InfoS("Polling static pod manifests", "url", s.url, "period", s.period)
	periodic.Run(ctx, s.clock, s.period, true, s.poll)
}

func (s *HTTPSource) poll(ctx context.Context) {
	err := s.fetch(ctx)
	switch {
	case err == nil && s.lastErr != "":
		klog.InfoS("Static pod URL is readable again", "url", s.url)
		s.lastErr = ""
	case err != nil && err.Error() != s.lastErr:
		s.lastErr = err.Error()
		klog.ErrorS(err, "Could not read static pods from URL; keeping the last good set", "url", s.url)
		s.recorder.Eventf(s.nodeRef, v1.EventTypeWarning, "FailedValidation", "Could not read static pods from %s: %v", s.url, err)
	}
}

func (s *HTTPSource) fetch(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return err
	}
	for k, vs := range s.header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", s.url, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxManifestBytes+1))
	if err != nil {
		return err
	}
	if s.delivered && bytes.Equal(data, s.last) {
		return nil
	}
	s.last = data
	var pods []*v1.Pod
	if len(bytes.TrimSpace(data)) > 0 {
		decoded, err := decodePods(data)
		if err != nil {
			return err
		}
		for _, p := range decoded {
			sp, err := s.static.pod(p, s.url, false)
			if err != nil {
				return err
			}
			pods = append(pods, sp)
		}
	}
	s.delivered = true
	s.out.Set(ctx, podutil.HTTPSource, pods)
	return nil
}
