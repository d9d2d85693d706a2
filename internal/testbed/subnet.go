package testbed

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// subnetClaims holds one file per pod subnet a live test process uses.
// Test packages run as separate processes at once, on both runtimes: two
// bridges with the same subnet would route each other's pods away ("no
// route to host"), so each containerd claims a subnet of its own here.
const subnetClaims = "/run/nodelet-test-subnets"

// claimSubnet reserves a /20 in 10.100.0.0–10.199.255.255 that no live
// test process holds, reclaiming the claims of processes that died.
func claimSubnet() (subnet string, release func(), err error) {
	if err := os.MkdirAll(subnetClaims, 0o755); err != nil {
		return "", nil, err
	}
	for i := 0; i < 1600; i++ {
		net := fmt.Sprintf("10.%d.%d.0", 100+i/16, (i%16)*16)
		claim := filepath.Join(subnetClaims, net)
		ok, err := tryClaim(claim)
		if err != nil {
			return "", nil, err
		}
		if ok {
			return net + "/20", func() { _ = os.Remove(claim) }, nil // a claim left behind is reclaimed as stale
		}
	}
	return "", nil, errors.New("no free test pod subnet: every one is claimed in " + subnetClaims)
}

// tryClaim creates the claim file with this process's PID, taking over a
// claim whose process is gone.
func tryClaim(claim string) (bool, error) {
	for attempt := 0; attempt < 2; attempt++ {
		f, err := os.OpenFile(claim, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			_, werr := f.WriteString(strconv.Itoa(os.Getpid()))
			return true, errors.Join(werr, f.Close())
		}
		if !errors.Is(err, fs.ErrExist) {
			return false, err
		}
		if !stale(claim) {
			return false, nil
		}
		if err := os.Remove(claim); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, err
		}
	}
	return false, nil
}

// stale reports whether the claim's process no longer exists.
func stale(claim string) bool {
	b, err := os.ReadFile(claim)
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return true
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
