// Package workingset keeps nodelet's resident set to the part of its own
// binary it uses.
//
// nodelet's code and read-only data are pages of its executable, mapped
// from the page cache as they are first touched, and the kernel maps 64 KiB
// around each page touched (fault-around). Start-up touches code that never
// runs again: package initialisation, configuration, TLS bootstrapping,
// the first listings. Measured on the development VM, a standalone nodelet
// idle for 30 s touched 1.7 MiB of its text and 2.8 MiB of its read-only
// data (Referenced in smaps), while 29 MiB of them stayed mapped; once
// unmapped, what it uses came back within a minute as 17 MiB (the pages
// touched are scattered, and each brings its 64 KiB).
//
// The Trimmer unmaps those pages (madvise MADV_DONTNEED) once start-up is
// over, and again after a burst of work (pod starts) mapped more of them.
// The page cache keeps them: what runs again is mapped back by a minor
// fault, without reading the disk. What does not stays in the page cache
// unmapped, where the kernel reclaims it first when memory runs short
// instead of protecting it as a mapped executable page. The page cache
// stays charged to nodelet's cgroup as before: this shrinks what nodelet
// holds mapped (its RSS), not what the kernel may cache. Only mappings of
// the executable that nothing can have written are touched: read-only and
// private, with no anonymous (copied) page.
package workingset

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
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
		if key, ok := strings.CutSuffix(fields[0], ":"); ok && !strings.Contains(fields[0], "-") {
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
// returns how many bytes were mapped before.
func Trim() (int64, error) {
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
		// Addresses from the kernel, not Go pointers: no unsafe needed.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, r.Start, r.End-r.Start, unix.MADV_DONTNEED); errno != 0 {
			return unmapped, fmt.Errorf("madvise %#x-%#x: %w", r.Start, r.End, errno)
		}
		unmapped += r.Resident
	}
	return unmapped, nil
}

// FileResident returns how many bytes of files (the binary, its libraries)
// the process has mapped: /proc/self/statm's shared pages, a counter the
// kernel keeps, so reading it walks no page table.
func FileResident() (int64, error) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return 0, fmt.Errorf("/proc/self/statm: %q", b)
	}
	pages, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/self/statm: %w", err)
	}
	return pages * int64(os.Getpagesize()), nil
}

// Options configure a Trimmer.
type Options struct {
	// StartedUp reports whether start-up is over (every pod source has
	// delivered); the first trim waits for it, then for Settle.
	StartedUp func() bool
	// Settle defaults to 10 s.
	Settle time.Duration
	// Every Period (default a minute) the mapped files are measured; when
	// they grew by more than Slack (default 4 MiB) over the least seen
	// since the last trim, the binary is trimmed again. What a burst of
	// pod starts mapped goes a minute after; the steady work's own pages,
	// mapped back within a minute of each trim, set the baseline.
	Period time.Duration
	Slack  int64
	Clock  clock.Clock
	// Trim and Resident default to the package's.
	Trim     func() (int64, error)
	Resident func() (int64, error)
}

// Trimmer trims the process's mapped binary after start-up, and again
// whenever it grew back by more than the slack.
type Trimmer struct{ o Options }

// New returns a Trimmer.
func New(o Options) *Trimmer {
	if o.Settle == 0 {
		o.Settle = 10 * time.Second
	}
	if o.Period == 0 {
		o.Period = time.Minute
	}
	if o.Slack == 0 {
		o.Slack = 4 << 20
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Trim == nil {
		o.Trim = Trim
	}
	if o.Resident == nil {
		o.Resident = FileResident
	}
	return &Trimmer{o: o}
}

// Run trims until ctx ends. A failed trim or reading is logged and costs
// nothing else: the pages stay mapped.
func (t *Trimmer) Run(ctx context.Context) {
	for !t.o.StartedUp() {
		if !t.wait(ctx, time.Second) {
			return
		}
	}
	if !t.wait(ctx, t.o.Settle) {
		return
	}
	t.trim()
	var least int64 = -1 // unknown until the first reading after a trim
	for t.wait(ctx, t.o.Period) {
		n, err := t.o.Resident()
		switch {
		case err != nil:
			klog.ErrorS(err, "Reading the mapped files failed")
		case least >= 0 && n > least+t.o.Slack:
			t.trim()
			least = -1
		case least < 0 || n < least:
			least = n
		}
	}
}

func (t *Trimmer) trim() {
	n, err := t.o.Trim()
	if err != nil {
		klog.ErrorS(err, "Unmapping the binary's pages failed")
		return
	}
	klog.V(2).InfoS("Unmapped the binary's pages; what runs is mapped back from the page cache", "unmappedMiB", float64(n)/(1<<20))
}

func (t *Trimmer) wait(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-t.o.Clock.After(d):
		return true
	}
}
