package topologymanager

import (
	"maps"
	"slices"
)

// The policies, as topologyManagerPolicy names them.
const (
	PolicyNone           = "none"
	PolicyBestEffort     = "best-effort"
	PolicyRestricted     = "restricted"
	PolicySingleNUMANode = "single-numa-node"
)

// policy merges the providers' hints into the one placement a container
// (or pod) gets, and says whether the pod may be admitted with it.
type policy struct {
	name string
	// nodes are the machine's NUMA nodes; all of them is the placement
	// of a resource without preference.
	nodes []int
	// distances, by node ID, rank masks of equal size when
	// preferClosest is set.
	distances     map[int][]uint64
	preferClosest bool
}

func (p *policy) all() Mask { return NewMask(p.nodes...) }

// merge finds the best hint over every combination of one hint per
// resource, as upstream's policies do: best-effort admits whatever it
// finds, restricted and single-numa-node only a preferred placement, and
// single-numa-node considers single-node hints alone.
func (p *policy) merge(providers []map[string][]Hint) (Hint, bool) {
	lists := filterProviderHints(providers)
	if p.name == PolicySingleNUMANode {
		lists = singleNodeHints(lists)
	}
	best := p.bestOf(lists)
	if p.name == PolicySingleNUMANode && best.NUMANodes == p.all() {
		best = Hint{Preferred: best.Preferred}
	}
	return best, p.name == PolicyBestEffort || best.Preferred
}

// filterProviderHints flattens the providers' hints to one list per
// resource: a provider (or resource) without hints has no preference; an
// empty list means no placement fits.
func filterProviderHints(providers []map[string][]Hint) [][]Hint {
	var out [][]Hint
	for _, hints := range providers {
		if len(hints) == 0 {
			out = append(out, []Hint{{Preferred: true}})
			continue
		}
		for _, resource := range slices.Sorted(maps.Keys(hints)) {
			switch list := hints[resource]; {
			case list == nil:
				out = append(out, []Hint{{Preferred: true}})
			case len(list) == 0:
				out = append(out, []Hint{{Preferred: false}})
			default:
				out = append(out, list)
			}
		}
	}
	return out
}

func singleNodeHints(lists [][]Hint) [][]Hint {
	out := make([][]Hint, len(lists))
	for i, list := range lists {
		for _, h := range list {
			if h.Preferred && h.NUMANodes.Count() <= 1 {
				out[i] = append(out[i], h)
			}
		}
	}
	return out
}

func (p *policy) bestOf(lists [][]Hint) Hint {
	m := merger{p: p, bestNonPreferredCount: maxOfNarrowest(lists)}
	var best *Hint
	permute(lists, nil, func(perm []Hint) {
		h := mergePermutation(p.all(), perm)
		best = m.compare(best, &h)
	})
	if best == nil {
		return Hint{NUMANodes: p.all()}
	}
	return *best
}

// permute calls f with each choice of one hint from every list.
func permute(lists [][]Hint, acc []Hint, f func([]Hint)) {
	if len(acc) == len(lists) {
		f(acc)
		return
	}
	for _, h := range lists[len(acc)] {
		permute(lists, append(acc, h), f)
	}
}

// mergePermutation intersects the hints' nodes; the result is preferred
// only when every hint is and all that name nodes name the same ones.
func mergePermutation(all Mask, perm []Hint) Hint {
	merged, preferred := all, true
	var first Mask
	for _, h := range perm {
		if h.NUMANodes != 0 {
			if first == 0 {
				first = h.NUMANodes
			} else if h.NUMANodes != first {
				preferred = false
			}
			merged &= h.NUMANodes
		}
		if !h.Preferred {
			preferred = false
		}
	}
	return Hint{NUMANodes: merged, Preferred: preferred}
}

// maxOfNarrowest is the largest of the resources' narrowest placements:
// no non-preferred merge can be narrower than that.
func maxOfNarrowest(lists [][]Hint) int {
	most := 0
	for _, list := range lists {
		var narrowest Mask
		for _, h := range list {
			if h.NUMANodes != 0 && (narrowest == 0 || h.NUMANodes.narrowerThan(narrowest)) {
				narrowest = h.NUMANodes
			}
		}
		most = max(most, narrowest.Count())
	}
	return most
}

type merger struct {
	p                     *policy
	bestNonPreferredCount int
}

// compare keeps the better of the best so far and a candidate: preferred
// beats not; among preferred the narrowest (or closest) wins; among
// non-preferred, the one nearest the smallest possible size.
func (m merger) compare(cur, cand *Hint) *Hint {
	switch {
	case cand.NUMANodes.Count() == 0:
		return cur
	case cur == nil:
		return cand
	case cur.Preferred != cand.Preferred:
		if cand.Preferred {
			return cand
		}
		return cur
	case cur.Preferred:
		return m.better(cur, cand)
	}
	best, cc, nc := m.bestNonPreferredCount, cur.NUMANodes.Count(), cand.NUMANodes.Count()
	switch {
	case cc > best:
		return m.better(cur, cand)
	case cc == best:
		if nc != best {
			return cur
		}
		return m.better(cur, cand)
	case nc > best:
		return cur
	case nc == best:
		return cand
	case nc > cc:
		return cand
	case nc < cc:
		return cur
	}
	return m.better(cur, cand)
}

// better of two placements: the narrowest, or with prefer-closest-numa-
// nodes among equally wide ones the closest (lowest average distance).
func (m merger) better(cur, cand *Hint) *Hint {
	a, b := cur.NUMANodes, cand.NUMANodes
	if a == b {
		return cur
	}
	if m.p.preferClosest && m.p.name != PolicySingleNUMANode && a.Count() == b.Count() {
		da, db := m.p.averageDistance(a), m.p.averageDistance(b)
		if da != db {
			if da < db {
				return cur
			}
			return cand
		}
	}
	if a.narrowerThan(b) {
		return cur
	}
	return cand
}

func (p *policy) averageDistance(m Mask) float64 {
	var sum, n float64
	for _, a := range m.IDs() {
		for _, b := range m.IDs() {
			if d := p.distances[a]; b < len(d) {
				sum += float64(d[b])
			}
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / n
}
