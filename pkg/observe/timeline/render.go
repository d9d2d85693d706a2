package timeline

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nodelet/nodelet/pkg/observe/instrument"
)

// waterfallWidth is the width of the text waterfall's bars.
const waterfallWidth = 40

// WriteText writes the timeline as a table: each step's offset from the
// first, its duration, kind, name, outcome and detail, and a waterfall
// bar showing where in the pod's life it fell. A summary line gives the
// start latency (first seen to running) when the pod ran.
func WriteText(w io.Writer, t Timeline) error {
	fmt.Fprintf(w, "pod %s/%s (uid %s)\n", t.Namespace, t.Name, t.UID)
	if len(t.Steps) == 0 {
		_, err := fmt.Fprintln(w, "no steps recorded")
		return err
	}
	origin, last := t.Steps[0].Start, t.Steps[0].End
	for _, s := range t.Steps {
		if s.Start.Before(origin) {
			origin = s.Start
		}
		if s.End.After(last) {
			last = s.End
		}
	}
	span := last.Sub(origin)
	if started, ok := StartLatency(t); ok {
		fmt.Fprintf(w, "started in %s (first seen to running)\n", round(started))
	}
	if t.Dropped > 0 {
		fmt.Fprintf(w, "%d steps dropped to stay bounded\n", t.Dropped)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tTOOK\tKIND\tSTEP\tOUTCOME\tWATERFALL\tDETAIL")
	for _, s := range t.Steps {
		fmt.Fprintf(tw, "+%s\t%s\t%s\t%s\t%s\t%s\t%s\n", round(s.Start.Sub(origin)), round(s.Duration()), s.Kind, s.Name,
			oneLine(s.Outcome, 40), bar(s.Start.Sub(origin), s.Duration(), span), oneLine(s.Detail, 100))
	}
	return tw.Flush()
}

// StartLatency is the time from the pod's first sighting to its first
// Running status, as the pod start metric counts it.
func StartLatency(t Timeline) (time.Duration, bool) {
	var seen, running *Step
	for i := range t.Steps {
		switch s := &t.Steps[i]; s.Kind {
		case instrument.KindSource:
			if seen == nil {
				seen = s
			}
		case instrument.KindRunning:
			if running == nil {
				running = s
			}
		}
	}
	if seen == nil || running == nil {
		return 0, false
	}
	return running.Start.Sub(seen.Start), true
}

// bar draws a step as '#' over its share of the pod's life ('|' for a
// point in time).
func bar(at, took, span time.Duration) string {
	if span <= 0 {
		return "|"
	}
	from := int(int64(waterfallWidth) * int64(at) / int64(span))
	n := int(int64(waterfallWidth) * int64(took) / int64(span))
	from = min(from, waterfallWidth-1)
	fill, mark := "#", n
	if took == 0 || n == 0 {
		fill, mark = "|", 1
	}
	mark = min(mark, waterfallWidth-from)
	return strings.Repeat(".", from) + strings.Repeat(fill, mark) + strings.Repeat(".", waterfallWidth-from-mark)
}

func round(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	default:
		return d.String()
	}
}

func oneLine(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}
