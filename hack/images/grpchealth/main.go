// Command grpchealth serves the standard gRPC health service for probe
// tests: SERVING, or NOT_SERVING while /tmp/unhealthy exists.
package main

import (
	"context"
	"flag"
	"log"
	"net"
	"os"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

type server struct {
	healthpb.UnimplementedHealthServer
}

func (server) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if _, err := os.Stat("/tmp/unhealthy"); err == nil {
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func main() {
	addr := flag.String("listen", ":9090", "address to serve on")
	flag.Parse()
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, server{})
	log.Fatal(s.Serve(l))
}
