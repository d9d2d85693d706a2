package periodic

import (
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// WaitStopped waits for the goroutines of running to return, for at most
// bound: a component's Run returns once its goroutines have, so nothing
// of it calls the runtime after the connection closes; one stuck in a
// call that ignores its cancelled context must not hold nodelet's exit
// for ever. It reports whether they all returned, and logs what is left
// (what names them) when they did not.
func WaitStopped(running *sync.WaitGroup, bound time.Duration, what string) bool {
	done := make(chan struct{})
	go func() {
		running.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(bound): // a real-time bound on shutdown, not a sleep
		klog.InfoS("Goroutines still running after the stop wait; leaving them", "what", what, "wait", bound)
		return false
	}
}
