// Package otlptest is an in-process OTLP/gRPC trace receiver for tests:
// it keeps the spans it is sent, and can stall as a wedged collector does.
package otlptest

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// Span is a received span, flattened.
type Span struct {
	TraceID, SpanID, ParentID string
	Name                      string
	Start, End                time.Time
	// Error is the status message of a span that failed ("" if none).
	Error string
	// Attributes and Resource hold the string values.
	Attributes, Resource map[string]string
}

// Receiver is an OTLP trace service on a local TCP port.
type Receiver struct {
	collectorpb.UnimplementedTraceServiceServer
	Addr string

	srv *grpc.Server
	mu  sync.Mutex
	// spans received; exports counts Export calls; stalled ones block
	// until Unstall or Stop.
	spans   []Span
	exports int
	stall   chan struct{}
}

// Start serves on 127.0.0.1, on a port of its own.
func Start() (*Receiver, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Receiver{Addr: l.Addr().String(), srv: grpc.NewServer()}
	collectorpb.RegisterTraceServiceServer(r.srv, r)
	go func() { _ = r.srv.Serve(l) }()
	return r, nil
}

// Stop ends the service and any stalled export.
func (r *Receiver) Stop() {
	r.Unstall()
	r.srv.Stop()
}

// Stall makes every export from now on wait, as a wedged collector's.
func (r *Receiver) Stall() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stall == nil {
		r.stall = make(chan struct{})
	}
}

// Unstall releases the stalled exports.
func (r *Receiver) Unstall() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stall != nil {
		close(r.stall)
		r.stall = nil
	}
}

// Export keeps the spans of a request.
func (r *Receiver) Export(ctx context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	r.exports++
	stall := r.stall
	r.mu.Unlock()
	if stall != nil {
		select {
		case <-stall:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var got []Span
	for _, rs := range req.ResourceSpans {
		res := values(rs.GetResource().GetAttributes())
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := Span{TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId), Name: s.Name,
					Start: time.Unix(0, int64(s.StartTimeUnixNano)), End: time.Unix(0, int64(s.EndTimeUnixNano)),
					Attributes: values(s.Attributes), Resource: res}
				if len(s.ParentSpanId) > 0 {
					sp.ParentID = hex.EncodeToString(s.ParentSpanId)
				}
				if s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR {
					sp.Error = s.GetStatus().GetMessage()
				}
				got = append(got, sp)
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.mu.Unlock()
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

func values(kvs []*commonpb.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		out[kv.Key] = kv.GetValue().GetStringValue()
	}
	return out
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

// Exports counts the export calls received, stalled ones included.
func (r *Receiver) Exports() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.exports
}

// Tree renders the trace of the span as an indented tree of names, with
// each span's start after the root's and duration, children in start
// order.
func Tree(spans []Span, traceID string) string {
	children := map[string][]Span{}
	var roots []Span
	for _, s := range spans {
		if s.TraceID != traceID {
			continue
		}
		if s.ParentID == "" {
			roots = append(roots, s)
		} else {
			children[s.ParentID] = append(children[s.ParentID], s)
		}
	}
	var b []byte
	var walk func(s Span, origin time.Time, depth int)
	walk = func(s Span, origin time.Time, depth int) {
		line := fmt.Sprintf("%*s%s +%v %v", 2*depth, "", s.Name, s.Start.Sub(origin).Round(time.Millisecond), s.End.Sub(s.Start).Round(time.Millisecond))
		if s.Error != "" {
			line += " [error: " + s.Error + "]"
		}
		b = append(b, line+"\n"...)
		kids := children[s.SpanID]
		slices.SortStableFunc(kids, func(a, b Span) int { return a.Start.Compare(b.Start) })
		for _, k := range kids {
			walk(k, origin, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, r.Start, 0)
	}
	return string(b)
}
