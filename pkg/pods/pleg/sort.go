package pleg

import "sort"

// sortEvents makes the order of one pod's events deterministic (map
// iteration is not), which keeps logs and tests readable.
func sortEvents(es []*Event) {
	sort.SliceStable(es, func(i, j int) bool {
		if es[i].Data != es[j].Data {
			return es[i].Data < es[j].Data
		}
		return es[i].Type < es[j].Type
	})
}
