package volume

import (
	"fmt"
	"sync"
	"testing"

	"github.com/moby/sys/mountinfo"

	"github.com/nodelet/nodelet/internal/testutil"
)

// TestMountTableCoalescesReads: callers that ask while a read runs share
// the next read, which begins after they asked (an older one could miss
// a mount made just before).
func TestMountTableCoalescesReads(t *testing.T) {
	var mu sync.Mutex
	reads := 0
	release := make(chan struct{})
	started := make(chan struct{}, 10)
	tbl := &mountTable{readAll: func() ([]*mountinfo.Info, error) {
		mu.Lock()
		reads++
		n := reads
		mu.Unlock()
		started <- struct{}{}
		<-release
		return []*mountinfo.Info{{Mountpoint: fmt.Sprintf("/read-%d", n)}}, nil
	}}
	first := make(chan string, 1)
	go func() {
		m, _ := tbl.read()
		first <- m[0].Mountpoint
	}()
	<-started // read 1 runs
	const waiting = 8
	var wg sync.WaitGroup
	got := make(chan string, waiting)
	for range waiting {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, _ := tbl.read()
			got <- m[0].Mountpoint
		}()
	}
	testutil.WaitFor(t, "the callers to queue", func() bool {
		tbl.mu.Lock()
		defer tbl.mu.Unlock()
		return tbl.next != nil && tbl.next.waiters == waiting
	})
	close(release)
	wg.Wait()
	close(got)
	if f := <-first; f != "/read-1" {
		t.Fatalf("the first caller got %s", f)
	}
	for m := range got {
		if m == "/read-1" {
			t.Fatal("a caller that asked during read 1 got read 1's table")
		}
	}
	if reads != 2 {
		t.Fatalf("%d reads, want 2: one for the first caller, one for the %d that asked during it", reads, waiting)
	}
}

// TestMountPointsUnderReadsThisProcesssTable lists real mount points.
func TestMountPointsUnderReadsThisProcesssTable(t *testing.T) {
	m, err := MountPointsUnder("/proc")
	testutil.Must(t, err)
	found := false
	for _, p := range m {
		found = found || p == "/proc"
	}
	if !found {
		t.Fatalf("mount points under /proc: %v, want /proc itself", m)
	}
}
