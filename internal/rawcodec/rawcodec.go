// Package rawcodec is a gRPC codec that passes messages through as bytes,
// for test servers that relay or decode calls themselves.
package rawcodec

// Codec is the codec; messages are *[]byte.
type Codec struct{}

func (Codec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (Codec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}

// Name is "proto": the bytes on the wire are protobuf.
func (Codec) Name() string { return "proto" }
