package kerneltunables

import (
	"fmt"

	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// Check holds the kernel to the kubelet's settings
// (protectKernelDefaults: check only) and refuses a node with swap on
// unless failSwapOn is off, as upstream does.
func Check(c *kubeletv1beta1.KubeletConfiguration) error {
	if err := Ensure("", c.ProtectKernelDefaults); err != nil {
		return err
	}
	on, areas, err := SwapOn("")
	switch {
	case err != nil:
		return fmt.Errorf("failed to determine if swap is on: %w", err)
	case on && *c.FailSwapOn:
		return fmt.Errorf("running with swap on is not supported, please disable swap or set --fail-swap-on flag to false (failSwapOn); /proc/swaps lists %q", areas)
	case on:
		klog.InfoS("Swap is on and failSwapOn is off: containers get swap only as memorySwap.swapBehavior allows", "swaps", areas, "swapBehavior", c.MemorySwap.SwapBehavior)
	}
	return nil
}
