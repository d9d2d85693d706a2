package testbed

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// subnetClaims holds one file per pod subnet a live test process uses.
// Test packages run as separate processes at once, on both runtimes: two
// bridges with the same subnet would route each other's pods away ("no
// route to host", or another pod's "connection refused"), so each
// containerd claims a subnet of its own here.
const subnetClaims = "/run/nodelet-test-subnets"

// claimSubnet reserves a /20 in 10.100.0.0–10.199.255.255 that no live
// test process holds and no host interface already uses (a bridge left by
// a test process that was killed keeps its route), reclaiming the claims
// of processes that died.
func claimSubnet() (subnet string, release func(), err error) {
	if err := os.MkdirAll(subnetClaims, 0o755); err != nil {
		return "", nil, err
	}
	inUse, err := hostNetworks()
	if err != nil {
		return "", nil, err
	}
	for i := 0; i < 1600; i++ {
		base := fmt.Sprintf("10.%d.%d.0", 100+i/16, (i%16)*16)
		_, cidr, _ := net.ParseCIDR(base + "/20")
		if overlaps(cidr, inUse) {
			continue
		}
		claim := filepath.Join(subnetClaims, base)
		ok, err := tryClaim(claim)
		if err != nil {
			return "", nil, err
		}
		if ok {
			return cidr.String(), func() { _ = os.Remove(claim) }, nil // a claim left behind is reclaimed as stale
		}
	}
	return "", nil, errors.New("no free test pod subnet: every one is claimed in " + subnetClaims + " or used by a host interface")
}

// hostNetworks lists the networks of the host's interface addresses.
func hostNetworks() ([]*net.IPNet, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("listing host addresses: %w", err)
	}
	var nets []*net.IPNet
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			nets = append(nets, n)
		}
	}
	return nets, nil
}

func overlaps(cidr *net.IPNet, nets []*net.IPNet) bool {
	for _, n := range nets {
		if cidr.Contains(n.IP) || n.Contains(cidr.IP) {
			return true
		}
	}
	return false
}

// tryClaim creates the claim file holding this process's PID, taking over
// a claim whose process is gone. The file appears with its PID already in
// it (written aside, then linked into place): a claim another process
// sees empty would look stale and be taken twice.
func tryClaim(claim string) (bool, error) {
	tmp, err := os.CreateTemp(filepath.Dir(claim), ".claim-*")
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.WriteString(strconv.Itoa(os.Getpid()))
	if err := errors.Join(werr, tmp.Close()); err != nil {
		return false, err
	}
	for attempt := 0; attempt < 2; attempt++ {
		err := os.Link(tmp.Name(), claim)
		if err == nil {
			return true, nil
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
