// Package testutil holds what many tests need and no product code does.
package testutil

import (
	"os"
	"path/filepath"
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

// Closed waits for ch to close, failing the test after 30 s with what
// was to end: a test of a goroutine's end fails rather than hangs until
// go test's timeout.
func Closed[T any](t testing.TB, what string, ch <-chan T) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not end within 30 s", what)
	}
}

// Golden compares got with the golden file at path; with
// NODELET_UPDATE_GOLDEN=1 in the environment it writes got there
// instead (review the diff).
func Golden(t testing.TB, path, got string) {
	t.Helper()
	if os.Getenv("NODELET_UPDATE_GOLDEN") == "1" {
		Must(t, os.MkdirAll(filepath.Dir(path), 0o755))
		Must(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (NODELET_UPDATE_GOLDEN=1 writes it)", err)
	}
	if string(want) != got {
		t.Fatalf("%s differs (NODELET_UPDATE_GOLDEN=1 rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}
