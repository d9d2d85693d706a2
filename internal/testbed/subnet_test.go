package testbed

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func TestTryClaim(t *testing.T) {
	dir := t.TempDir()
	claim := filepath.Join(dir, "10.100.0.0")
	write := func(content string) {
		if err := os.WriteFile(claim, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A live process's claim (the parent of this test: alive while it runs).
	write(strconv.Itoa(os.Getppid()))
	if ok, err := tryClaim(claim); ok || err != nil {
		t.Fatalf("took a live claim: %v %v", ok, err)
	}
	// A dead process's claim is taken over, with this PID in it at once.
	write("2147483646")
	if ok, err := tryClaim(claim); !ok || err != nil {
		t.Fatalf("stale claim not taken: %v %v", ok, err)
	}
	if b, _ := os.ReadFile(claim); string(b) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("claim holds %q", b)
	}
	// Taken now: a second try fails, and leaves no temporary files.
	if ok, err := tryClaim(claim); ok || err != nil {
		t.Fatalf("claimed twice: %v %v", ok, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("left %d files", len(entries))
	}
}

func TestOverlaps(t *testing.T) {
	_, cidr, _ := net.ParseCIDR("10.100.16.0/20")
	for _, c := range []struct {
		addr string
		want bool
	}{
		{"10.100.17.1/20", true},   // a bridge left on this subnet
		{"10.100.0.1/20", false},   // the neighbouring /20
		{"10.96.0.1/12", true},     // a wider network covering it
		{"192.0.2.2/24", false},    // the host's uplink
		{"10.100.31.255/32", true}, // the last address
	} {
		ip, n, _ := net.ParseCIDR(c.addr)
		n.IP = ip
		if got := overlaps(cidr, []*net.IPNet{n}); got != c.want {
			t.Errorf("%s: overlaps %v, want %v", c.addr, got, c.want)
		}
	}
}
