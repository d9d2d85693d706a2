package testbed

import (
	"os"
	"testing"
	"time"
)

// The run time is read to the nanosecond: a spin of 25 ms on this
// process is seen as about 25 ms, where /proc/<pid>/stat would say 20 or
// 30.
func TestProcessCPUCountsRunTimeFinely(t *testing.T) {
	before, err := ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Spin until the process has run 25 ms more, by its own count; a
	// deadline keeps a broken reader from spinning for ever.
	deadline := time.Now().Add(10 * time.Second)
	var spent time.Duration
	for spent < 25*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("the process ran %v in 10 s of spinning, by ProcessCPU", spent)
		}
		after, err := ProcessCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		spent = after - before
	}
	if spent%(10*time.Millisecond) == 0 {
		t.Errorf("ProcessCPU moved by %v, a whole number of 10 ms ticks: it reads /proc/<pid>/stat", spent)
	}
	run, err := threadsRunTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if run < spent {
		t.Errorf("threads ran %v in all, less than the %v just measured", run, spent)
	}
}
