//go:build race

package testbed

// raceEnabled builds the nodelet under test with the race detector when
// the tests themselves run with it.
const raceEnabled = true
