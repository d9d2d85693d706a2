//go:build integration

// Package standalone tests nodelet end to end as an operator runs it:
// the real binary, static pod manifests, a real containerd, and the
// read-only API.
package standalone

import (
	"testing"

	"github.com/nodelet/nodelet/internal/testbed"
)

var cd *testbed.Containerd

func TestMain(m *testing.M) { testbed.Main(m, &cd) }
