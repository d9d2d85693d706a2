// Package testutil holds what many tests need and no product code does.
package testutil

import (
	"testing"
	"time"
)

// Must fails the test at once on a setup error: a test whose setup
// failed would only go on to fail, or worse pass, for the wrong reason.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// WaitFor polls cond until it holds, failing the test after 30 s with
// what it was waiting for. Use it for what another goroutine does; a fake
// clock's time is stepped by the test itself.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling interval
	}
}
