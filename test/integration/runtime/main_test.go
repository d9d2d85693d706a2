//go:build integration

// Package runtime tests the CRI runtime manager against a real containerd:
// sandboxes, containers, restarts, hooks and teardown as the runtime
// actually carries them out.
package runtime

import (
	"testing"

	"github.com/nodelet/nodelet/internal/testbed"
)

var cd *testbed.Containerd

func TestMain(m *testing.M) { testbed.Main(m, &cd) }
