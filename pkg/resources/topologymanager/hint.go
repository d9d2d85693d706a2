package topologymanager

import (
	"math/bits"
	"strconv"
	"strings"
)

// Mask is a set of NUMA node IDs (0 to 63). The zero Mask in a Hint
// means "anywhere": the provider has no preference.
type Mask uint64

// NewMask is the set of the nodes.
func NewMask(ids ...int) Mask {
	var m Mask
	for _, id := range ids {
		m |= 1 << uint(id)
	}
	return m
}

// Count is the number of nodes in m.
func (m Mask) Count() int { return bits.OnesCount64(uint64(m)) }

// Has reports whether node id is in m.
func (m Mask) Has(id int) bool { return m&(1<<uint(id)) != 0 }

// IDs lists m's nodes, ascending.
func (m Mask) IDs() []int {
	var out []int
	for v := uint64(m); v != 0; v &= v - 1 {
		out = append(out, bits.TrailingZeros64(v))
	}
	return out
}

// narrowerThan: fewer nodes, or as many with more lower-numbered ones
// (the kernel allocates from low nodes first), as upstream ranks masks.
func (m Mask) narrowerThan(o Mask) bool {
	if m.Count() == o.Count() {
		return m < o
	}
	return m.Count() < o.Count()
}

func (m Mask) String() string {
	ids := m.IDs()
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(id)
	}
	return "{" + strings.Join(s, ",") + "}"
}

// Hint says on which NUMA nodes a provider could place a resource, and
// whether that placement is one it prefers (the narrowest that fits).
type Hint struct {
	NUMANodes Mask
	Preferred bool
}

func (h Hint) String() string {
	if h.NUMANodes == 0 {
		return "{any preferred=" + strconv.FormatBool(h.Preferred) + "}"
	}
	return h.NUMANodes.String() + " preferred=" + strconv.FormatBool(h.Preferred)
}

// IterateMasks calls f with every non-empty subset of the nodes, the
// smaller subsets first.
func IterateMasks(ids []int, f func(Mask)) {
	for size := 1; size <= len(ids); size++ {
		var walk func(start int, acc Mask, left int)
		walk = func(start int, acc Mask, left int) {
			if left == 0 {
				f(acc)
				return
			}
			for i := start; i <= len(ids)-left; i++ {
				walk(i+1, acc|NewMask(ids[i]), left-1)
			}
		}
		walk(0, 0, size)
	}
}
