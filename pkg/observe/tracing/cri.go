package tracing

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// UnaryClientInterceptor makes a span of each CRI call made within a
// pod's traced sync, as a child of that sync, and passes the trace on to
// the runtime (W3C traceparent) so a runtime that traces joins it. Calls
// outside a sampled trace (the PLEG's relists, say) go through untouched.
func (t *Tracer) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if !t.on || !trace.SpanContextFromContext(ctx).IsSampled() {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		service, rpc, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
		ctx, span := t.tracer.Start(ctx, strings.TrimPrefix(method, "/"), trace.WithSpanKind(trace.SpanKindClient),
			trace.WithTimestamp(t.clock.Now()), trace.WithAttributes(
				attribute.String("rpc.system", "grpc"), attribute.String("rpc.service", service), attribute.String("rpc.method", rpc)))
		carrier := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, carrier)
		for k, v := range carrier {
			ctx = metadata.AppendToOutgoingContext(ctx, k, v)
		}
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err != nil {
			s := status.Convert(err)
			span.SetAttributes(attribute.String("rpc.grpc.status_code", s.Code().String()))
			span.SetStatus(codes.Error, s.Message())
		}
		span.End(trace.WithTimestamp(t.clock.Now()))
		return err
	}
}
