// Package checksum computes the checksums of the upstream kubelet's
// checkpoint files (the CPU, memory and device managers' state), so that
// nodelet reads the files the kubelet wrote and the kubelet reads
// nodelet's: a node moves between the two without losing what its
// running containers were given.
//
// Upstream hashes (FNV-32a) the k8s.io/utils/dump.ForHash text of its Go
// value; that text names the value's types by package and type name.
// nodelet's types live elsewhere, so Dump renames them in the text to
// the upstream names first.
package checksum

import (
	"fmt"
	"hash/fnv"
	"strings"

	"k8s.io/utils/dump"
)

// Dump is upstream's checksum of v: renames are pairs of the type names
// as nodelet's value prints them and as upstream's would.
func Dump(v any, renames ...string) uint64 {
	text := dump.ForHash(v)
	if len(renames) > 0 {
		text = strings.NewReplacer(renames...).Replace(text)
	}
	h := fnv.New32a()
	fmt.Fprintf(h, "%v", text)
	return uint64(h.Sum32())
}

// DumpZeroed is Dump of v computed with *field, v's checksum field, zero
// (as upstream checksums a checkpoint); *field is left as it was.
func DumpZeroed(v any, field *uint64, renames ...string) uint64 {
	saved := *field
	*field = 0
	defer func() { *field = saved }()
	return Dump(v, renames...)
}
