//go:build !failpoints

// Package failpoint marks the places where the fault-injection tests stop,
// wedge or kill nodelet. In a normal build every point is an empty
// function the compiler removes; the test bed builds nodelet with the
// "failpoints" tag, where a point does what a file named after it in
// $NODELET_FAILPOINTS_DIR says (see failpoint_enabled.go).
package failpoint

// Enabled reports whether this build has failpoints.
const Enabled = false

// Inject is a failpoint; in this build it does nothing.
func Inject(name string) {}
