package container

import "sort"

func sortNewestFirst(s []*Status) {
	sort.SliceStable(s, func(i, j int) bool { return s[i].CreatedAt.After(s[j].CreatedAt) })
}

// SortNewestFirst orders container statuses newest first, the order
// PodStatus promises.
func SortNewestFirst(s []*Status) { sortNewestFirst(s) }

// SortSandboxesNewestFirst orders sandbox statuses newest first.
func SortSandboxesNewestFirst(s []*SandboxStatus) {
	sort.SliceStable(s, func(i, j int) bool { return s[i].CreatedAt.After(s[j].CreatedAt) })
}
