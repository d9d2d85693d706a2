// Package selftrim keeps nodelet's resident set to the part of its own
// binary it uses.
//
// nodelet's code and read-only data are pages of its executable, mapped
// from the page cache as they are first touched; the kernel maps 64 KiB
// around each page touched (fault-around), or the whole folio when the
// page cache holds the binary in large folios, as it does once the binary
// was read through. Start-up touches code that never runs again: package
// initialisation, configuration, TLS bootstrapping, the first listings.
// Measured on the development VM, a standalone nodelet idle for 30 s
// touched 1.7 MiB of its text and 2.8 MiB of its read-only data
// (Referenced in smaps), while 29 MiB of them stayed mapped.
//
// Once start-up is over, the Trimmer marks the executable's read-only
// mappings for random access (no readahead: a fault reads its own page),
// unmaps them, and drops the binary's unmapped pages from the page cache
// (a large folio that a running thread has mapped back meanwhile stays).
// What runs afterwards is read back page by page and mapped again; what
// does not run stays out of memory. The first use of a page after the
// trim costs a read from the disk (a major fault), once.
//
// A burst of pod starts or stops maps much of the binary back: the API
// client's, the runtime client's and the volume code's pages, 12 MiB
// for 110 pods on the development VM. Once the burst is over (for 10 s
// the process used under 2% of a core and mapped under 1 MiB more) and
// the binary's resident pages have grown by 4 MiB past their least since
// the last trim, the Trimmer trims again, and returns the heap's free
// pages to the kernel. (When a burst begins right after a trim, the
// least seen between the two trims before stands in: the readings after
// this trim hold the burst's pages.) These later trims only unmap: the
// page cache keeps the pages that ran, so the steady state's come back
// at once and the burst's at the next burst, each by a minor fault, not
// a read from the disk.
//
// Only mappings of the executable that nothing can have written are
// touched: read-only and private, with no anonymous (copied) page.
package selftrim

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Region is a mapping of the executable that may be unmapped.
type Region struct {
	Start, End uintptr
	// Resident is how many of its bytes were mapped when read.
	Resident int64
}

// Regions returns the read-only private mappings of exe in smaps (the
// format of /proc/<pid>/smaps) that hold no anonymous page.
func Regions(smaps io.Reader, exe string) ([]Region, error) {
	var out []Region
	var cur *Region
	var anonymous bool
	flush := func() {
		if cur != nil && !anonymous {
			out = append(out, *cur)
		}
		cur, anonymous = nil, false
	}
	sc := bufio.NewScanner(smaps)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if key, ok := strings.CutSuffix(fields[0], ":"); ok { // a header starts "start-end"
			if cur == nil || len(fields) < 2 {
				continue
			}
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				continue // VmFlags and the like
			}
			switch key {
			case "Rss":
				cur.Resident = kb * 1024
			case "Anonymous":
				anonymous = kb > 0
			}
			continue
		}
		flush()
		r, ok, err := mapping(fields, exe)
		if err != nil {
			return nil, fmt.Errorf("reading mapping %q: %w", line, err)
		}
		if ok {
			cur = &r
		}
	}
	flush()
	return out, sc.Err()
}

// mapping parses a mapping's header line ("start-end perms offset dev
// inode path") and reports whether it is a read-only private mapping of
// exe.
func mapping(fields []string, exe string) (Region, bool, error) {
	if len(fields) < 6 || strings.Join(fields[5:], " ") != exe {
		return Region{}, false, nil
	}
	perms := fields[1]
	if len(perms) != 4 || perms[1] == 'w' || perms[3] != 'p' {
		return Region{}, false, nil
	}
	start, end, ok := strings.Cut(fields[0], "-")
	if !ok {
		return Region{}, false, fmt.Errorf("no range")
	}
	s, err := strconv.ParseUint(start, 16, 64)
	if err != nil {
		return Region{}, false, err
	}
	e, err := strconv.ParseUint(end, 16, 64)
	if err != nil {
		return Region{}, false, err
	}
	return Region{Start: uintptr(s), End: uintptr(e)}, true, nil
}

// Trim unmaps this process's read-only mappings of its executable and
// returns how many bytes were mapped before. With evict, it also drops
// the binary's unmapped pages from the page cache, so that what is read
// again comes back page by page.
func Trim(evict bool) (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	regions, err := Regions(f, exe)
	if err != nil {
		return 0, err
	}
	var unmapped int64
	for _, r := range regions {
		// Random access first: from now on a fault reads its own page,
		// not a readahead window (which the kernel would keep as a
		// large folio and map whole at the next touch).
		for _, advice := range []uintptr{unix.MADV_RANDOM, unix.MADV_DONTNEED} {
			// Addresses from the kernel, not Go pointers: no unsafe needed.
			if _, _, errno := unix.Syscall(unix.SYS_MADVISE, r.Start, r.End-r.Start, advice); errno != 0 {
				return unmapped, fmt.Errorf("madvise(%d) %#x-%#x: %w", advice, r.Start, r.End, errno)
			}
		}
		unmapped += r.Resident
	}
	if !evict {
		return unmapped, nil
	}
	return unmapped, evictFile(exe)
}

// evictFile drops the binary's pages that nothing maps from the page cache,
// so that what is read again comes back page by page.
func evictFile(exe string) error {
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return err
	}
	defer f.Close()
	// A binary written moments ago (installed, or just built) has dirty
	// pages, which the kernel does not evict: write them first.
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return fmt.Errorf("writing %s back before evicting it: %w", exe, err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("evicting %s from the page cache: %w", exe, err)
	}
	return nil
}

// Usage is what the Trimmer watches of its process.
type Usage struct {
	// CPU is the time the process has run, in user and kernel mode.
	CPU time.Duration
	// File is how many of its resident bytes are file-backed.
	File int64
}

// Options configure a Trimmer.
type Options struct {
	// StartedUp reports whether start-up is over (every pod source has
	// delivered); the first trim waits for it, then for Settle (default
	// 10 s). Settle is also the interval at which Usage is read.
	StartedUp func() bool
	Settle    time.Duration
	// Quiet is the share of one core below which an interval counts as
	// quiet (default 0.02: nodelet idles at 0.005, and runs 110 pods at
	// 0.013, while a burst of starts or stops keeps it near 0.05).
	Quiet float64
	// Regrowth is how far the file-backed resident set must grow past
	// its least since the last trim for a quiet interval to trim again
	// (default 4 MiB: an idle nodelet maps 2 to 3 MiB back within
	// minutes of a trim, a burst of 110 pod starts or stops 5 to 10).
	Regrowth int64
	Clock    clock.Clock
	// Trim defaults to TrimAndScavenge; Usage to this process's.
	Trim  func(evict bool) (int64, error)
	Usage func() (Usage, error)
}

// Trimmer trims the process's mapped binary once start-up is over, and
// again when a burst of work has mapped much more of it and is over.
// From the first trim on, the binary is read a page at a time, so what
// is mapped is what ran; a burst of pod starts or stops runs code the
// node then does not run until the next burst.
type Trimmer struct{ o Options }

// New returns a Trimmer.
func New(o Options) *Trimmer {
	if o.Settle == 0 {
		o.Settle = 10 * time.Second
	}
	if o.Quiet == 0 {
		o.Quiet = 0.02
	}
	if o.Regrowth == 0 {
		o.Regrowth = 4 << 20
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Trim == nil {
		o.Trim = TrimAndScavenge
	}
	if o.Usage == nil {
		o.Usage = SelfUsage
	}
	return &Trimmer{o: o}
}

// Run trims once start-up is over, then each time the process has grown
// by Regrowth and been quiet for an interval, until ctx ends. A failed
// trim is logged and costs nothing else: the pages stay mapped.
func (t *Trimmer) Run(ctx context.Context) {
	for !t.o.StartedUp() {
		if !t.wait(ctx, time.Second) {
			return
		}
	}
	if !t.wait(ctx, t.o.Settle) {
		return
	}
	g, ok := t.trim(ctx, "start-up is over", true, growth{})
	for ok && t.wait(ctx, t.o.Settle) {
		u, err := t.o.Usage()
		if err != nil {
			t.stopWatching(ctx, err)
			return
		}
		if g.observe(u, t.o.Quiet*float64(t.o.Settle), t.o.Regrowth) {
			g, ok = t.trim(ctx, "a burst of work is over", false, g)
		}
	}
}

func (t *Trimmer) stopWatching(ctx context.Context, err error) {
	klog.ErrorS(err, "Reading nodelet's own usage failed; the binary's pages are no longer trimmed after bursts")
	<-ctx.Done()
}

// growth follows the process between two trims.
type growth struct {
	// last is the previous reading, the first one taken just after the
	// trim.
	last Usage
	// fresh: no reading was taken since the one after the trim.
	fresh bool
	// least is the least file-backed resident set seen since the trim:
	// what the process maps back once it runs again. carried is the
	// least of the interval between the two trims before, 0 if none.
	least, carried int64
	// leastCarried: the least is the one carried over (a burst began
	// right after the trim).
	leastCarried bool
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// settled is how little the file-backed resident set may grow over an
// interval that counts as quiet: a single pod started or stopped uses
// little CPU, but maps code back as it goes (a trim then would cost it
// the reads of what it runs next).
const settled = 1 << 20

// observe takes a reading and reports whether to trim: since the last
// reading the process used less than quiet CPU time and its file-backed
// resident set grew by less than settled, and that set is now regrowth
// above its least.
//
// The least is first taken from the first reading after the trim; but if
// a burst began right after the trim (as a trim falls in the quiet just
// before one), that reading holds the burst's pages, and a least taken
// there would keep them mapped until the next burst is over. The least
// seen between the two trims before stands in for it then.
func (g *growth) observe(u Usage, quiet float64, regrowth int64) bool {
	busy, grew := float64(u.CPU-g.last.CPU), u.File-g.last.File
	switch {
	case g.fresh && busy >= quiet && g.carried > 0:
		g.least, g.leastCarried = g.carried, true
	case g.fresh:
		g.least = u.File
	default:
		g.least = min(g.least, u.File)
	}
	g.last, g.fresh = u, false
	return busy < quiet && grew < settled && u.File-g.least >= regrowth
}

// trim unmaps the binary's pages. The first trim also evicts them from
// the page cache (see the package doc); the later ones keep it, which
// then holds only pages that ran, read one at a time: the next burst's
// faults map them (microseconds) instead of reading them from the disk
// (400 µs each on the development VM under load, which a single pod's
// start would pay some 200 times).
//
// It returns what to follow until the next trim, starting from a reading
// taken just after this one; ok is false when that reading failed (then
// nothing is trimmed again, and it returns once ctx ends).
func (t *Trimmer) trim(ctx context.Context, why string, evict bool, before growth) (g growth, ok bool) {
	n, err := t.o.Trim(evict)
	if err != nil {
		klog.ErrorS(err, "Unmapping the binary's pages failed", "why", why)
	} else {
		// The reading that led to the trim, and the least it was held
		// against, say why it came when it did.
		klog.InfoS("Unmapped the binary's pages; what runs is read back a page at a time", "why", why, "unmappedMiB", mib(n),
			"fileMiB", mib(before.last.File), "leastMiB", mib(before.least), "leastCarried", before.leastCarried)
	}
	u, err := t.o.Usage()
	if err != nil {
		t.stopWatching(ctx, err)
		return growth{}, false
	}
	return growth{last: u, fresh: true, carried: before.least}, true
}

// TrimAndScavenge trims the binary (see Trim) and returns the heap's
// free pages to the kernel: after a burst, both hold what only the burst
// used. (The runtime would scavenge the heap's, but over minutes.)
func TrimAndScavenge(evict bool) (int64, error) {
	n, err := Trim(evict)
	debug.FreeOSMemory()
	return n, err
}

// SelfUsage reads this process's CPU time and file-backed resident set.
func SelfUsage() (Usage, error) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return Usage{}, fmt.Errorf("getrusage: %w", err)
	}
	statm, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return Usage{}, err
	}
	file, err := statmFile(string(statm))
	if err != nil {
		return Usage{}, err
	}
	return Usage{CPU: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), File: file}, nil
}

// statmFile reads the resident file-backed (and shared memory) bytes
// from /proc/<pid>/statm: "size resident shared text lib data dt", in
// pages.
func statmFile(statm string) (int64, error) {
	f := strings.Fields(statm)
	if len(f) < 3 {
		return 0, fmt.Errorf("statm %q: too few fields", statm)
	}
	pages, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("statm %q: %w", statm, err)
	}
	return pages * int64(os.Getpagesize()), nil
}

func (t *Trimmer) wait(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-t.o.Clock.After(d):
		return true
	}
}
