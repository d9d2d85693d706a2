package containeropts

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// DNS is the node's DNS configuration for pods (the KubeletConfiguration's
// clusterDNS, clusterDomain and resolvConf).
type DNS struct {
	ClusterDNS    []string
	ClusterDomain string
	// ResolvConf is the host's resolver file, the base of dnsPolicy
	// Default; "" means none.
	ResolvConf string
}

// PodDNS is the resolver configuration for a pod's sandbox, from which the
// runtime writes its /etc/resolv.conf, per the pod's dnsPolicy and
// dnsConfig, as upstream computes it.
func (d DNS) PodDNS(pod *v1.Pod) (*runtimeapi.DNSConfig, error) {
	policy := pod.Spec.DNSPolicy
	if policy == "" {
		policy = v1.DNSClusterFirst
	}
	// ClusterFirst does not apply to host-network pods: they resolve as
	// the node does unless they ask for ClusterFirstWithHostNet.
	if policy == v1.DNSClusterFirst && pod.Spec.HostNetwork {
		policy = v1.DNSDefault
	}
	if (policy == v1.DNSClusterFirst || policy == v1.DNSClusterFirstWithHostNet) && len(d.ClusterDNS) == 0 {
		policy = v1.DNSDefault
	}
	cfg := &runtimeapi.DNSConfig{}
	switch policy {
	case v1.DNSNone:
	case v1.DNSDefault:
		host, err := d.hostResolvConf()
		if err != nil {
			return nil, err
		}
		cfg = host
	case v1.DNSClusterFirst, v1.DNSClusterFirstWithHostNet:
		host, err := d.hostResolvConf()
		if err != nil {
			return nil, err
		}
		cfg.Servers = append([]string(nil), d.ClusterDNS...)
		if d.ClusterDomain != "" {
			cfg.Searches = []string{pod.Namespace + ".svc." + d.ClusterDomain, "svc." + d.ClusterDomain, d.ClusterDomain}
		}
		cfg.Searches = appendUnique(cfg.Searches, host.Searches...)
		cfg.Options = []string{"ndots:5"}
	default:
		return nil, fmt.Errorf("dnsPolicy %q is not supported", policy)
	}
	if c := pod.Spec.DNSConfig; c != nil {
		cfg.Servers = appendUnique(cfg.Servers, c.Nameservers...)
		cfg.Searches = appendUnique(cfg.Searches, c.Searches...)
		cfg.Options = mergeOptions(cfg.Options, c.Options)
	}
	return cfg, nil
}

// The resolver reads at most this many nameservers and search domains
// (glibc's MAXNS; upstream's MaxDNSSearchPaths).
const (
	maxDNSNameservers = 3
	maxDNSSearches    = 32
)

// limitDNS cuts cfg to what the resolver reads, returning what it omitted.
func limitDNS(cfg *runtimeapi.DNSConfig) []string {
	var msgs []string
	if len(cfg.Servers) > maxDNSNameservers {
		cfg.Servers = cfg.Servers[:maxDNSNameservers]
		msgs = append(msgs, fmt.Sprintf("Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: %s", strings.Join(cfg.Servers, " ")))
	}
	if len(cfg.Searches) > maxDNSSearches {
		cfg.Searches = cfg.Searches[:maxDNSSearches]
		msgs = append(msgs, fmt.Sprintf("Search Line limits were exceeded, some search paths have been omitted, the applied search line is: %s", strings.Join(cfg.Searches, " ")))
	}
	return msgs
}

func (d DNS) hostResolvConf() (*runtimeapi.DNSConfig, error) {
	cfg := &runtimeapi.DNSConfig{}
	if d.ResolvConf == "" {
		return cfg, nil
	}
	f, err := os.Open(d.ResolvConf)
	if err != nil {
		if os.IsNotExist(err) {
			return cfg, nil
		}
		return nil, fmt.Errorf("reading the host's resolver configuration: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		switch fields[0] {
		case "nameserver":
			cfg.Servers = append(cfg.Servers, fields[1])
		case "search", "domain":
			cfg.Searches = fields[1:]
		case "options":
			cfg.Options = append(cfg.Options, fields[1:]...)
		}
	}
	return cfg, sc.Err()
}

func appendUnique(list []string, more ...string) []string {
	seen := map[string]bool{}
	for _, s := range list {
		seen[s] = true
	}
	for _, s := range more {
		if !seen[s] {
			list = append(list, s)
			seen[s] = true
		}
	}
	return list
}

// mergeOptions applies the pod's resolver options over the policy's: an
// option of the same name is replaced.
func mergeOptions(base []string, pod []v1.PodDNSConfigOption) []string {
	out := []string{}
	names := map[string]int{}
	set := func(name, opt string) {
		if i, ok := names[name]; ok {
			out[i] = opt
			return
		}
		names[name] = len(out)
		out = append(out, opt)
	}
	for _, o := range base {
		name, _, _ := strings.Cut(o, ":")
		set(name, o)
	}
	for _, o := range pod {
		opt := o.Name
		if o.Value != nil {
			opt += ":" + *o.Value
		}
		set(o.Name, opt)
	}
	return out
}

// Hostname is a pod's hostname (spec.hostname or its name, cut to a DNS
// label) and, with a subdomain, its fully qualified name, as upstream
// builds it: <hostname>.<subdomain>.<namespace>.svc.<clusterDomain>, even
// with no cluster domain (the name then ends in "svc."). With
// setHostnameAsFQDN the FQDN is what the pod is given as its hostname.
func (d DNS) Hostname(pod *v1.Pod) (hostname, fqdn string, err error) {
	if o := pod.Spec.HostnameOverride; o != nil {
		// The whole name, dots and all, with no domain of the pod's.
		if msgs := validation.IsDNS1123Subdomain(*o); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod hostnameOverride %q is not a valid DNS subdomain: %s", *o, strings.Join(msgs, ";"))
		}
		return truncateHostname(*o), "", nil
	}
	h := pod.Name
	if pod.Spec.Hostname != "" {
		if msgs := validation.IsDNS1123Label(pod.Spec.Hostname); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod Hostname %q is not a valid DNS label: %s", pod.Spec.Hostname, strings.Join(msgs, ";"))
		}
		h = pod.Spec.Hostname
	}
	h = truncateHostname(h)
	if h == "" {
		return "", "", fmt.Errorf("pod %s/%s has no usable hostname", pod.Namespace, pod.Name)
	}
	if pod.Spec.Subdomain != "" {
		if msgs := validation.IsDNS1123Label(pod.Spec.Subdomain); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod Subdomain %q is not a valid DNS label: %s", pod.Spec.Subdomain, strings.Join(msgs, ";"))
		}
		fqdn = fmt.Sprintf("%s.%s.%s.svc.%s", h, pod.Spec.Subdomain, pod.Namespace, d.ClusterDomain)
	}
	return h, fqdn, nil
}

// truncateHostname keeps a hostname within 63 characters, as upstream
// truncates it, without a trailing dash or dot.
func truncateHostname(h string) string {
	if len(h) > 63 {
		h = strings.TrimRight(h[:63], "-.")
	}
	return h
}

// hostsFile is the /etc/hosts nodelet mounts into a pod's containers: the
// loopback names, the pod's own IP with its names, and its hostAliases.
// A host-network pod gets the node's file with its hostAliases.
func (d DNS) hostsFile(pod *v1.Pod, podIPs []string, hostHosts string) ([]byte, error) {
	var b strings.Builder
	if pod.Spec.HostNetwork {
		base, err := os.ReadFile(hostHosts)
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
		b.Write(base)
	} else {
		hostname, fqdn, err := d.Hostname(pod)
		if err != nil {
			return nil, err
		}
		b.WriteString("# Kubernetes-managed hosts file.\n")
		b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n")
		for _, ip := range podIPs {
			if fqdn != "" {
				fmt.Fprintf(&b, "%s\t%s\t%s\n", ip, fqdn, hostname)
			} else {
				fmt.Fprintf(&b, "%s\t%s\n", ip, hostname)
			}
		}
	}
	if len(pod.Spec.HostAliases) > 0 {
		b.WriteString("\n# Entries added by HostAliases.\n")
		for _, a := range pod.Spec.HostAliases {
			fmt.Fprintf(&b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
		}
	}
	return []byte(b.String()), nil
}
