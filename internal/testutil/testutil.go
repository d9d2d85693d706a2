// Package testutil holds what many tests need and no product code does.
package testutil

import "testing"

// Must fails the test at once on a setup error: a test whose setup
// failed would only go on to fail, or worse pass, for the wrong reason.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
