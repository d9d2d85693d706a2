// Validation of the configuration groups that need more than a line or
// two of validate: serving, eviction thresholds, node shutdown.

package kubeletconfig

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/nodelet/nodelet/pkg/node/eviction"
	cliflag "k8s.io/component-base/cli/flag"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/cpuset"
)

// validateServing checks the TLS settings (names as the upstream kubelet
// takes them) and the /healthz address.
func validateServing(c *kubeletv1beta1.KubeletConfiguration) []error {
	var errs []error
	if c.TLSMinVersion != "" {
		if _, err := cliflag.TLSVersion(c.TLSMinVersion); err != nil {
			errs = append(errs, fmt.Errorf("tlsMinVersion: %v", err))
		}
	}
	if _, err := cliflag.TLSCipherSuites(c.TLSCipherSuites); err != nil {
		errs = append(errs, fmt.Errorf("tlsCipherSuites: %v", err))
	}
	if p := *c.HealthzPort; p < 0 || p > 65535 {
		errs = append(errs, fmt.Errorf("healthzPort (%d) must be between 0 and 65535", p))
	}
	if net.ParseIP(c.HealthzBindAddress) == nil {
		errs = append(errs, fmt.Errorf("healthzBindAddress %q is not an IP address", c.HealthzBindAddress))
	}
	return errs
}

// validateEvictionSoft checks the thresholds as upstream does: each one
// parses, each soft one has a grace period, and every grace period belongs
// to a soft threshold; minimum reclaims parse and the maximum grace period
// is not negative.
func validateEvictionSoft(c *kubeletv1beta1.KubeletConfiguration) []error {
	var errs []error
	if _, err := eviction.ParseThresholds(c.EvictionMinimumReclaim); err != nil {
		errs = append(errs, fmt.Errorf("evictionMinimumReclaim: %v", err))
	}
	if c.EvictionMaxPodGracePeriod < 0 {
		errs = append(errs, fmt.Errorf("evictionMaxPodGracePeriod (%d) must not be negative", c.EvictionMaxPodGracePeriod))
	}
	if _, err := eviction.ParseThresholds(c.EvictionHard); err != nil {
		errs = append(errs, fmt.Errorf("evictionHard: %v", err))
	}
	if _, err := eviction.ParseThresholds(c.EvictionSoft); err != nil {
		errs = append(errs, fmt.Errorf("evictionSoft: %v", err))
	}
	for signal := range c.EvictionSoft {
		if _, ok := c.EvictionSoftGracePeriod[signal]; !ok {
			errs = append(errs, fmt.Errorf("evictionSoft %s has no evictionSoftGracePeriod", signal))
		}
	}
	for signal, d := range c.EvictionSoftGracePeriod {
		if _, ok := c.EvictionSoft[signal]; !ok {
			errs = append(errs, fmt.Errorf("evictionSoftGracePeriod %s has no evictionSoft threshold", signal))
		}
		if dur, err := time.ParseDuration(d); err != nil || dur < 0 {
			errs = append(errs, fmt.Errorf("evictionSoftGracePeriod %s: %q is not a duration such as 1m30s", signal, d))
		}
	}
	return errs
}

// validateShutdown checks the shutdown grace periods as upstream does:
// whole seconds from one up (or zero), the critical part within the
// total, and either the two periods or the priority groups, not both.
func validateShutdown(c *kubeletv1beta1.KubeletConfiguration) []error {
	var errs []error
	total, critical := c.ShutdownGracePeriod.Duration, c.ShutdownGracePeriodCriticalPods.Duration
	for _, p := range []struct {
		name string
		d    time.Duration
	}{{"shutdownGracePeriod", total}, {"shutdownGracePeriodCriticalPods", critical}} {
		if p.d < 0 || (p.d > 0 && p.d < time.Second) {
			errs = append(errs, fmt.Errorf("%s (%v) must be zero or at least 1s", p.name, p.d))
		}
	}
	if critical > total {
		errs = append(errs, fmt.Errorf("shutdownGracePeriodCriticalPods (%v) must not exceed shutdownGracePeriod (%v)", critical, total))
	}
	if len(c.ShutdownGracePeriodByPodPriority) > 0 && (total > 0 || critical > 0) {
		errs = append(errs, errors.New("shutdownGracePeriodByPodPriority and shutdownGracePeriod cannot both be set: keep one"))
	}
	for i, g := range c.ShutdownGracePeriodByPodPriority {
		if g.ShutdownGracePeriodSeconds < 0 {
			errs = append(errs, fmt.Errorf("shutdownGracePeriodByPodPriority[%d].shutdownGracePeriodSeconds (%d) must not be negative", i, g.ShutdownGracePeriodSeconds))
		}
	}
	return errs
}

// validateResourceManagers checks the CPU, memory and topology managers'
// settings and swap: the names they take, and a CPU list that parses.
func validateResourceManagers(c *kubeletv1beta1.KubeletConfiguration) []error {
	var errs []error
	oneOf := func(field, value string, allowed ...string) {
		if !slices.Contains(allowed, value) {
			errs = append(errs, fmt.Errorf("%s %q is not one of %s", field, value, strings.Join(allowed, ", ")))
		}
	}
	oneOf("cpuManagerPolicy", c.CPUManagerPolicy, "none", "static")
	oneOf("memoryManagerPolicy", c.MemoryManagerPolicy, "None", "Static")
	oneOf("topologyManagerPolicy", c.TopologyManagerPolicy, "none", "best-effort", "restricted", "single-numa-node")
	oneOf("topologyManagerScope", c.TopologyManagerScope, "container", "pod")
	if b := c.MemorySwap.SwapBehavior; b != "" {
		oneOf("memorySwap.swapBehavior", b, "NoSwap", "LimitedSwap")
	}
	if c.CPUManagerReconcilePeriod.Duration < 0 {
		errs = append(errs, fmt.Errorf("cpuManagerReconcilePeriod (%v) must not be negative", c.CPUManagerReconcilePeriod.Duration))
	}
	if c.ReservedSystemCPUs != "" {
		if _, err := cpuset.Parse(c.ReservedSystemCPUs); err != nil {
			errs = append(errs, fmt.Errorf("reservedSystemCPUs %q is not a CPU list such as 0-1,4: %v", c.ReservedSystemCPUs, err))
		}
	}
	if len(c.ReservedMemory) > 0 && c.MemoryManagerPolicy != "Static" {
		errs = append(errs, errors.New("reservedMemory needs memoryManagerPolicy Static"))
	}
	if len(c.CPUManagerPolicyOptions) > 0 && c.CPUManagerPolicy != "static" {
		errs = append(errs, errors.New("cpuManagerPolicyOptions need cpuManagerPolicy static"))
	}
	return errs
}
