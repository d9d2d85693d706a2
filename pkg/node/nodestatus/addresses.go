package nodestatus

import (
	"fmt"
	"net"
)

// NodeIPs are the node's addresses: --node-ip's when given (an
// unspecified one, 0.0.0.0 or ::, stands for the default route's address
// of its family), else the address of the default route's interface,
// else the first global unicast address.
func NodeIPs(given []net.IP) ([]string, error) {
	var out []string
	for _, ip := range given {
		if !ip.IsUnspecified() {
			if err := onThisHost(ip); err != nil {
				return nil, err
			}
			out = append(out, ip.String())
			continue
		}
		probe := "192.0.2.1:9"
		if ip.To4() == nil {
			probe = "[2001:db8::1]:9"
		}
		if found := defaultRouteIP(probe); found != "" {
			out = append(out, found)
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	if found := defaultRouteIP("192.0.2.1:9"); found != "" {
		return []string{found}, nil
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.IsGlobalUnicast() {
			return []string{n.IP.String()}, nil
		}
	}
	return []string{"127.0.0.1"}, nil
}

// onThisHost refuses a --node-ip that no interface of the host has, or
// that cannot be a node's address, as the kubelet does.
func onThisHost(ip net.IP) error {
	if ip.IsLoopback() || ip.IsMulticast() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() {
		return fmt.Errorf("--node-ip %s cannot be a node's address (loopback, multicast or link-local)", ip)
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return fmt.Errorf("--node-ip %s: listing the host's addresses: %w", ip, err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return nil
		}
	}
	return fmt.Errorf("--node-ip %s is not an address of this host", ip)
}

// defaultRouteIP is the local address a datagram to probe (a
// documentation address) would leave from; no packet is sent.
func defaultRouteIP(probe string) string {
	conn, err := net.Dial("udp", probe)
	if err != nil {
		return ""
	}
	defer conn.Close()
	if a, ok := conn.LocalAddr().(*net.UDPAddr); ok && !a.IP.IsLoopback() {
		return a.IP.String()
	}
	return ""
}
