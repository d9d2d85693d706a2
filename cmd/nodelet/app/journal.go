package app

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/node/journal"
	"github.com/nodelet/nodelet/pkg/pods/podsources"
	"github.com/nodelet/nodelet/pkg/pods/podstatus"
	"github.com/nodelet/nodelet/pkg/pods/podutil"
)

// journalRetention is how long a standalone node keeps the records of a
// pod that finished but that its manifest still lists (no source says
// when such a pod is gone for good).
const journalRetention = 24 * time.Hour

// journalRestoreAfter is how long the API source has, after a start, to
// deliver the pods before the journal's copy of them stands in: long
// enough for a reachable API server to answer, so a pod deleted while
// nodelet was down is never started again on the journal's word.
const journalRestoreAfter = 2 * time.Second

// openJournal opens the node journal and restores the status manager and
// the timelines from it; the pods themselves are restored by
// journalComponents, once the sources are built.
func openJournal(b *base) error {
	o := journal.Options{
		Path: filepath.Join(b.opts.RootDir, journal.File), Clock: b.clock, KeepTimelines: keepFinished(b.cfg),
	}
	if b.client == nil {
		o.Retention = journalRetention
	}
	j, state, err := journal.Open(o)
	if err != nil {
		return err
	}
	b.journal, b.journalState = j, state
	klog.InfoS("Node journal opened", "path", o.Path, "pods", len(state.Pods), "objects", len(state.Objects),
		"tokens", len(state.Tokens), "timelines", len(state.Timelines), "probeResults", len(state.Probes), "damagedRecords", len(state.Damaged), "bytes", state.Size)
	return nil
}

// restoreFromJournal gives the status manager and the timelines what the
// journal kept, before any pod is synced.
func restoreFromJournal(b *base) {
	s := b.journalState
	for _, p := range s.Pods {
		if p.Pod != nil && p.Status != nil {
			b.status.Restore(p.Pod, p.Status.Status, p.Status.Finished)
		}
	}
	b.timelines.Restore(s.Timelines)
	node := &v1.ObjectReference{Kind: "Node", Name: b.nodeName, APIVersion: "v1"}
	if s.MovedAside != "" {
		b.recorder.Eventf(node, v1.EventTypeWarning, "NodeJournalDamaged",
			"The node journal could not be read (%s); it was moved to %s and a new one started", s.MovedAsideReason, s.MovedAside)
	}
	if len(s.Damaged) > 0 {
		b.recorder.Eventf(node, v1.EventTypeWarning, "NodeJournalDamaged",
			"%d node journal records failed their checksum and were skipped: %s", len(s.Damaged), strings.Join(s.Damaged, ", "))
	}
}

// journalComponents run the journal's writer and stand the journal's
// pods in for a remote source's (the API server, the static pod URL)
// until that source answers. Manifest files are read again at once.
func journalComponents(b *base, podConfig *podsources.PodConfig) []component {
	out := []component{{"node journal", b.journal.Run}}
	var remote []string
	if b.client != nil {
		remote = append(remote, podutil.APISource)
	}
	if b.cfg.StaticPodURL != "" {
		remote = append(remote, podutil.HTTPSource)
	}
	for _, source := range remote {
		out = append(out, restoreSource(b, podConfig, source, b.journalState.SourcePods(source)))
	}
	return out
}

// restoreSource delivers a source's pods from the journal (possibly none)
// if the source has not delivered its own within journalRestoreAfter; the
// merge drops them if it has. Either way the node's pods are known then
// (the pod-resources API waits for that).
func restoreSource(b *base, podConfig *podsources.PodConfig, source string, pods []*v1.Pod) component {
	return runs("node journal restore of source "+source, func(ctx context.Context) {
		select {
		case <-ctx.Done():
			return
		case <-b.clock.After(journalRestoreAfter):
		}
		if podConfig.Restore(ctx, source, pods) {
			klog.InfoS("A pod source has not delivered the node's pods yet: running the node journal's", "source", source, "pods", len(pods))
		}
		// A component runs as long as nodelet does.
		<-ctx.Done()
	})
}

// The journal is what the status manager and the merge keep in it.
var (
	_ podstatus.Journal  = (*journal.Journal)(nil)
	_ podsources.Journal = (*journal.Journal)(nil)
)
