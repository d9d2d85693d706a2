//go:build integration

package nodeconformance

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// specResult is one spec of ginkgo's JSON report (--json-report).
type specResult struct {
	ContainerHierarchyTexts []string
	LeafNodeText            string
	LeafNodeType            string
	LeafNodeLocation        struct {
		FileName   string
		LineNumber int
	}
	State   string
	RunTime time.Duration
	Failure struct {
		Message  string
		Location struct {
			FileName   string
			LineNumber int
		}
	}
}

// name is the spec's full text, which --focus matches and the testdata
// files list: its containers' and its own texts, as ginkgo joins them
// (an empty text, such as the SIGKILL spec's unnamed Context, is left
// out, or the focus would never match it).
func (s specResult) name() string {
	var texts []string
	for _, t := range append(append([]string(nil), s.ContainerHierarchyTexts...), s.LeafNodeText) {
		if t != "" {
			texts = append(texts, t)
		}
	}
	return strings.Join(texts, " ")
}

// suiteReport is one suite's part of ginkgo's JSON report.
type suiteReport struct {
	SuiteDescription string
	SpecReports      []specResult
}

// readReport reads the specs a run reported, and apart from them its
// set-up nodes (BeforeSuite and the like: when one fails, no spec ran
// against the node).
func readReport(path string) (specs, setup []specResult, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var reports []suiteReport
	if err := json.Unmarshal(data, &reports); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, r := range reports {
		for _, s := range r.SpecReports {
			if s.LeafNodeType == "It" {
				specs = append(specs, s)
			} else {
				setup = append(setup, s)
			}
		}
	}
	return specs, setup, nil
}

// tally counts the specs by outcome: passed, failed (failed, timed out,
// panicked, interrupted or aborted) and skipped.
func tally(specs []specResult) (passed, failed, skipped []specResult) {
	for _, s := range specs {
		switch s.State {
		case "passed":
			passed = append(passed, s)
		case "skipped", "pending":
			skipped = append(skipped, s)
		default:
			failed = append(failed, s)
		}
	}
	return passed, failed, skipped
}

// readList reads a testdata list: one spec name per line, optionally
// followed by a tab and a reason; # starts a comment line.
func readList(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, reason, _ := strings.Cut(line, "\t")
		out[name] = reason
	}
	return out, sc.Err()
}

// focusOf is a --focus matching exactly the named specs of the suite
// described so: ginkgo matches its focus against the suite's description
// and the spec's text, joined by a space.
func focusOf(suite string, names map[string]string) string {
	quoted := make([]string, 0, len(names))
	for n := range names {
		quoted = append(quoted, regexp.QuoteMeta(n))
	}
	sort.Strings(quoted)
	return "^" + regexp.QuoteMeta(suite) + " (" + strings.Join(quoted, "|") + ")$"
}

// summary is the run's outcome in a few lines: the counts, then every
// failed spec with where it failed.
func summary(agent string, specs []specResult) string {
	passed, failed, skipped := tally(specs)
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d passed, %d failed, %d skipped\n", agent, len(passed), len(failed), len(skipped))
	slices.SortFunc(failed, func(a, b specResult) int { return strings.Compare(a.name(), b.name()) })
	for _, s := range failed {
		msg, _, _ := strings.Cut(strings.TrimSpace(s.Failure.Message), "\n")
		fmt.Fprintf(&b, "  FAILED (%s, %.0fs) %s\n    at %s:%d: %s\n", s.State, s.RunTime.Seconds(), s.name(),
			s.Failure.Location.FileName, s.Failure.Location.LineNumber, msg)
	}
	return b.String()
}
