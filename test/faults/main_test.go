//go:build integration

// Package faults injects one fault at a time into a node under load (a
// runtime or nodelet killed at a chosen step, bad input at every door)
// and checks the invariants a node agent owes its pods: none lost, none
// restarted without cause, nothing leaked, statuses true to the runtime.
// Each scenario adds a row to the table printed at the end; see
// docs/reliability.md.
package faults

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testbed"
)

var (
	cd *testbed.Containerd
	// cl is the control plane of the API server outage scenario.
	cl *testbed.Cluster
)

func TestMain(m *testing.M) {
	testbed.Main(m, &cd, func(context.Context) (func(), error) { return printTable, nil },
		testbed.WithCluster(&cl, "nodelet-faults-cluster-"))
}

// row is one scenario's line in the table.
type row struct {
	scenario, load, fault string
	invariants            []string
	converge              time.Duration
	failed                bool
}

var (
	tableMu sync.Mutex
	table   []row
)

// rows holds each running scenario's row until its test ends.
var rows = map[string]*row{}

// record adds the scenario's row once the test ends, marked if it failed.
func record(t *testing.T, r row) {
	tableMu.Lock()
	rows[t.Name()] = &r
	tableMu.Unlock()
	t.Cleanup(func() {
		tableMu.Lock()
		defer tableMu.Unlock()
		r := rows[t.Name()]
		r.failed = t.Failed()
		table = append(table, *r)
		delete(rows, t.Name())
	})
}

// setRow records how long the node took to converge after the fault.
func setRow(t *testing.T, converge time.Duration) {
	tableMu.Lock()
	defer tableMu.Unlock()
	rows[t.Name()].converge = converge
	t.Logf("converged %v after the fault", converge.Round(time.Millisecond))
}

func printTable() {
	tableMu.Lock()
	defer tableMu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-44s | %-26s | %-40s | %-9s | %s\n", "scenario", "load", "fault", "converged", "invariants checked")
	fmt.Fprintf(&b, "%s\n", strings.Repeat("-", 160))
	for _, r := range table {
		conv := r.converge.Round(10 * time.Millisecond).String()
		if r.failed {
			conv = "FAILED"
		}
		fmt.Fprintf(&b, "%-44s | %-26s | %-40s | %-9s | %s\n", r.scenario, r.load, r.fault, conv, strings.Join(r.invariants, ", "))
	}
	fmt.Fprint(os.Stderr, b.String())
}
