// Package crierr classifies what a CRI runtime answers by what the caller
// should do about it, and gives its own words without gRPC framing.
package crierr

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// IsNotFound reports whether the runtime says the object does not exist,
// which for stop and remove means the work is already done.
func IsNotFound(err error) bool { return status.Code(err) == codes.NotFound }

// Message is the runtime's own words for an error, without gRPC framing.
func Message(err error) string {
	if s, ok := status.FromError(err); ok {
		return s.Message()
	}
	return err.Error()
}
