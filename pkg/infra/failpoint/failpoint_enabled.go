//go:build failpoints

package failpoint

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// Enabled reports whether this build has failpoints.
const Enabled = true

// DirEnv names the directory holding the active failpoints: a file named
// after a point makes it act, as its content says:
//
//	pause  block there for as long as the file exists
//	kill   SIGKILL nodelet there (a crash at exactly that step)
//	panic  panic there
const DirEnv = "NODELET_FAILPOINTS_DIR"

// pollInterval is how often a paused point looks whether it may go on.
const pollInterval = 10 * time.Millisecond

// Inject acts as the failpoint's file says, if there is one.
func Inject(name string) {
	dir := os.Getenv(DirEnv)
	if dir == "" {
		return
	}
	path := filepath.Join(dir, name)
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	switch action := strings.TrimSpace(string(b)); action {
	case "pause":
		klog.InfoS("Failpoint: paused", "failpoint", name)
		for {
			if _, err := os.Stat(path); err != nil {
				break
			}
			time.Sleep(pollInterval) // a test's wedge, not synchronisation
		}
		klog.InfoS("Failpoint: released", "failpoint", name)
	case "kill":
		klog.InfoS("Failpoint: killing nodelet", "failpoint", name)
		klog.Flush()
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never returns
	case "panic":
		panic("failpoint " + name)
	default:
		klog.ErrorS(nil, "Failpoint: unknown action", "failpoint", name, "action", action)
	}
}
