package selftrim

import (
	"context"
	_ "embed"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testutil"
)

func TestRegionsAreTheExecutablesUnwrittenPrivateMappings(t *testing.T) {
	f, err := os.Open("testdata/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := Regions(f, "/usr/bin/nodelet")
	if err != nil {
		t.Fatal(err)
	}
	// Text and read-only data; not the data segment (writable), not the
	// read-only mapping with a copied page, not the shared one, not
	// another file's, not anonymous memory.
	want := []Region{{0x400000, 0x1513000, 13132 << 10}, {0x1513000, 0x28d3000, 15744 << 10}}
	if len(got) != len(want) {
		t.Fatalf("regions %#v, want %#v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("region %d: %#v, want %#v", i, got[i], want[i])
		}
	}
}

func TestRegionsRejectsAMalformedRange(t *testing.T) {
	_, err := Regions(strings.NewReader("zz-0400000 r-xp 00000000 fe:00 1 /bin/x\nRss: 4 kB\n"), "/bin/x")
	if err == nil {
		t.Fatal("a malformed range was accepted")
	}
}

// residentText reads how much of this test binary's read-only mappings is
// mapped.
func residentText(t *testing.T) int64 {
	t.Helper()
	var n int64
	for _, r := range textRegions(t) {
		n += r.Resident
	}
	return n
}

func textRegions(t *testing.T) []Region {
	t.Helper()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	regions, err := Regions(f, exe)
	if err != nil {
		t.Fatal(err)
	}
	if len(regions) == 0 {
		t.Fatalf("no read-only mapping of %s", exe)
	}
	return regions
}

// blob is 4 MiB of the test binary's read-only data that nothing reads
// after the trim.
//
//go:embed testdata/blob
var blob string

// mappedPages counts the pages of s mapped in this process
// (/proc/self/pagemap: bit 63 of each page's entry is "present").
func mappedPages(t *testing.T, s string) (mapped, pages int) {
	t.Helper()
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := uintptr(os.Getpagesize())
	start := uintptr(unsafe.Pointer(unsafe.StringData(s))) / page
	end := (uintptr(unsafe.Pointer(unsafe.StringData(s))) + uintptr(len(s)) + page - 1) / page
	entries := make([]byte, 8*(end-start))
	if _, err := f.ReadAt(entries, int64(start*8)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(entries); i += 8 {
		if binary.LittleEndian.Uint64(entries[i:])&(1<<63) != 0 {
			mapped++
		}
	}
	return mapped, len(entries) / 8
}

// cachedPages counts the pages of s in the page cache, mapped here or not
// (mincore on a file mapping reads the page cache).
func cachedPages(t *testing.T, s string) int {
	t.Helper()
	page := uintptr(os.Getpagesize())
	start := uintptr(unsafe.Pointer(unsafe.StringData(s))) &^ (page - 1)
	end := (uintptr(unsafe.Pointer(unsafe.StringData(s))) + uintptr(len(s)) + page - 1) &^ (page - 1)
	vec := make([]byte, (end-start)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, start, end-start, uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// populate maps all of the binary's read-only data, as a long start-up
// would have.
func populate(t *testing.T) {
	t.Helper()
	for _, r := range textRegions(t) {
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, r.Start, r.End-r.Start, unix.MADV_POPULATE_READ); errno != 0 {
			t.Fatal(errno)
		}
	}
}

func TestTrimWithoutEvictKeepsThePageCache(t *testing.T) {
	populate(t)
	if _, err := Trim(false); err != nil {
		t.Fatal(err)
	}
	mapped, pages := mappedPages(t, blob)
	if mapped > pages/16 {
		t.Fatalf("%d of the blob's %d pages still mapped after the trim", mapped, pages)
	}
	// Unmapped, but still cached: mapping it again reads nothing.
	if cached := cachedPages(t, blob); cached != pages {
		t.Fatalf("%d of the blob's %d pages left in the page cache", cached, pages)
	}
}

func TestTrimUnmapsThisProcesssBinary(t *testing.T) {
	populate(t)
	before := residentText(t)
	if mapped, pages := mappedPages(t, blob); mapped != pages {
		t.Fatalf("%d of the blob's %d pages mapped before the trim", mapped, pages)
	}
	unmapped, err := Trim(true)
	if err != nil {
		t.Fatal(err)
	}
	after := residentText(t)
	t.Logf("mapped before %d KiB, unmapped %d KiB, mapped after %d KiB", before>>10, unmapped>>10, after>>10)
	if unmapped != before {
		t.Errorf("Trim reports %d KiB unmapped, of %d KiB mapped", unmapped>>10, before>>10)
	}
	// What ran since (reading smaps, the test's own code) is mapped back,
	// 64 KiB around each page touched; what nothing read is not, but for
	// the blob's edges, next to data that was read.
	if mapped, pages := mappedPages(t, blob); mapped > pages/16 {
		t.Fatalf("%d of the blob's %d pages still mapped after the trim", mapped, pages)
	}
	if after >= before-int64(len(blob))*15/16 {
		t.Fatalf("still %d of %d KiB mapped after the trim", after>>10, before>>10)
	}
	if _, pages := mappedPages(t, blob); cachedPages(t, blob) > pages/16 {
		t.Fatalf("%d of the blob's %d pages still in the page cache after the trim", cachedPages(t, blob), pages)
	}
	// The process runs on: what it needs is mapped back from the page cache.
	if !strings.HasPrefix(blob, "nodelet maps") {
		t.Fatal("the blob reads differently after the trim")
	}
}

func TestTrimsWhenStartUpIsOverAndAgainAfterABurst(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	startedUp := make(chan bool)
	usage := make(chan Usage)
	trims := make(chan bool, 10) // each trim's evict
	ctx, cancel := context.WithCancel(context.Background())
	tr := New(Options{
		StartedUp: func() bool { return <-startedUp },
		Settle:    10 * time.Second, Clock: clk,
		Trim: func(evict bool) (int64, error) { trims <- evict; return 1 << 20, nil },
		Usage: func() (Usage, error) {
			select {
			case u := <-usage:
				return u, nil
			case <-ctx.Done(): // read after an unexpected trim
				return Usage{}, ctx.Err()
			}
		},
	})
	done := make(chan struct{})
	go func() { tr.Run(ctx); close(done) }()

	// Not while starting up, however long that takes: each answer is
	// taken, so the loop asked.
	for i := 0; i < 3; i++ {
		startedUp <- false
		waitForWaiter(t, clk)
		clk.Step(time.Minute)
	}
	startedUp <- true
	waitForWaiter(t, clk)
	clk.Step(9 * time.Second)
	if len(trims) != 0 {
		t.Fatal("trimmed before start-up settled")
	}
	clk.Step(time.Second)
	if evict := <-trims; !evict {
		t.Error("the start-up trim kept the page cache")
	}

	// Each interval's reading is taken, so the trimmer looked at each;
	// so is the one just after each trim.
	read := func(cpu time.Duration, fileMiB int64) {
		t.Helper()
		waitForWaiter(t, clk)
		clk.Step(10 * time.Second)
		usage <- Usage{CPU: cpu, File: fileMiB << 20}
	}
	afterTrim := func(cpu time.Duration, fileMiB int64) { usage <- Usage{CPU: cpu, File: fileMiB << 20} }
	// trimmed waits until the trimmer trimmed (and reads its usage) or
	// waits on its clock again.
	trimmed := func() (evict bool) {
		t.Helper()
		testutil.WaitFor(t, "a trim, or the trimmer waiting", func() bool { return len(trims) > 0 || clk.HasWaiters() })
		select {
		case evict = <-trims:
			return evict
		default:
			t.Fatal("no trim after a burst")
			return false
		}
	}
	afterTrim(time.Second, 10)
	read(time.Second+10*time.Millisecond, 12)    // the working set after the trim
	read(time.Second+50*time.Millisecond, 14)    // idle: 0.5% of a core
	read(4*time.Second, 22)                      // a burst: busy, and grown by 10 MiB
	read(5*time.Second, 24)                      // still busy
	read(5*time.Second+100*time.Millisecond, 26) // a last pod: little CPU, but mapping code back
	if len(trims) != 0 {
		t.Fatal("trimmed while idle, or during a burst")
	}
	read(5*time.Second+150*time.Millisecond, 26) // quiet, settled, 14 MiB above the least
	if evict := trimmed(); evict {
		t.Error("a trim after a burst evicted the page cache: the next burst would read it from the disk")
	}
	// A burst begins just after the trim: its first reading is no
	// steady state, and the least before (12 MiB) stands in for it.
	afterTrim(5*time.Second+160*time.Millisecond, 11)
	read(6*time.Second, 22)
	read(7*time.Second, 24)
	if len(trims) != 0 {
		t.Fatal("trimmed during a burst")
	}
	read(7*time.Second+50*time.Millisecond, 24) // quiet: 12 MiB above the least before
	if evict := trimmed(); evict {
		t.Error("a trim after a burst evicted the page cache")
	}
	// After a quiet first interval it starts over from what runs again
	// (13 MiB, not the 12 before): quiet and grown by less than 4 MiB is
	// no reason.
	afterTrim(7*time.Second+60*time.Millisecond, 11)
	read(7*time.Second+70*time.Millisecond, 13)
	read(7*time.Second+100*time.Millisecond, 16)
	read(7*time.Second+150*time.Millisecond, 16)
	cancel()
	<-done
	if len(trims) != 0 {
		t.Fatal("trimmed again without a burst")
	}
}

// TestStopsWatchingWhenItsUsageCannotBeRead: whether the reading just
// after a trim or a later one fails, the trimmer says so and stops.
func TestStopsWatchingWhenItsUsageCannotBeRead(t *testing.T) {
	for _, failing := range []int{1, 2} {
		t.Run(fmt.Sprintf("reading %d", failing), func(t *testing.T) {
			clk := testingclock.NewFakeClock(time.Unix(0, 0))
			reads := make(chan struct{}, 10)
			n := 0
			tr := New(Options{
				StartedUp: func() bool { return true }, Clock: clk,
				Trim: func(bool) (int64, error) { return 0, nil },
				Usage: func() (Usage, error) {
					reads <- struct{}{}
					if n++; n == failing {
						return Usage{}, os.ErrNotExist
					}
					return Usage{}, nil
				},
			})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { tr.Run(ctx); close(done) }()
			for i := 0; i < failing; i++ {
				waitForWaiter(t, clk)
				clk.Step(10 * time.Second) // the start-up trim, then an interval
				<-reads
			}
			testutil.WaitFor(t, "the trimmer to stop reading after a failure", func() bool { return !clk.HasWaiters() })
			cancel()
			<-done
			if len(reads) != 0 {
				t.Fatal("read again after a failure")
			}
		})
	}
}

func TestSelfUsage(t *testing.T) {
	u, err := SelfUsage()
	if err != nil {
		t.Fatal(err)
	}
	// A running test binary has run, and has its own code mapped.
	if u.CPU <= 0 || u.File < 1<<20 {
		t.Fatalf("usage %+v", u)
	}
	if _, err := statmFile("1 2"); err == nil {
		t.Error("a statm of two fields was accepted")
	}
	if n, err := statmFile("100 50 7 1 0 20 0\n"); err != nil || n != 7*int64(os.Getpagesize()) {
		t.Errorf("statm: %d, %v", n, err)
	}
}

func waitForWaiter(t *testing.T, clk *testingclock.FakeClock) {
	t.Helper()
	testutil.WaitFor(t, "the trimmer to wait on its clock", clk.HasWaiters)
}

// TestGrowthSaysWhenItsLeastIsCarried: the trim's log line says whether
// the least it was held against came over from before (a busy first
// interval) or from the first reading (a quiet one).
func TestGrowthSaysWhenItsLeastIsCarried(t *testing.T) {
	const quiet = float64(200 * time.Millisecond)
	for _, tc := range []struct {
		name      string
		cpu       time.Duration
		least     int64
		carriedIt bool
	}{
		{"busy first interval", time.Second, 12 << 20, true},
		{"quiet first interval", 10 * time.Millisecond, 20 << 20, false},
	} {
		g := growth{last: Usage{File: 11 << 20}, fresh: true, carried: 12 << 20}
		g.observe(Usage{CPU: tc.cpu, File: 20 << 20}, quiet, 4<<20)
		if g.least != tc.least || g.leastCarried != tc.carriedIt {
			t.Errorf("%s: least %d MiB, carried %v; want %d MiB, %v", tc.name, g.least>>20, g.leastCarried, tc.least>>20, tc.carriedIt)
		}
	}
}
