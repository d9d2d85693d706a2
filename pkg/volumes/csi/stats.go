package csi

import (
	"context"
	"path/filepath"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/pods/poddirs"
)

// VolumeStats measures a pod's published CSI volumes with their drivers'
// NodeGetVolumeStats, for /stats/summary; volumes of drivers without
// GET_VOLUME_STATS, or whose driver fails, are left out.
func (m *Mounter) VolumeStats(ctx context.Context, uid string) []statsapi.VolumeStats {
	dirs, _ := filepath.Glob(filepath.Join(poddirs.Root(m.o.RootDir).Volumes(types.UID(uid)), "kubernetes.io~csi", "*"))
	var out []statsapi.VolumeStats
	for _, dir := range dirs {
		data, err := readVolData(dir)
		if err != nil {
			continue
		}
		d, err := m.o.Drivers.Driver(data.DriverName)
		if err != nil || !d.Stats {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, m.o.Timeout)
		resp, err := d.Node.NodeGetVolumeStats(cctx, &csipb.NodeGetVolumeStatsRequest{
			VolumeId: data.VolumeHandle, VolumePath: filepath.Join(dir, "mount"), StagingTargetPath: data.StagingPath,
		})
		cancel()
		if err != nil {
			klog.V(3).InfoS("NodeGetVolumeStats failed", "driver", data.DriverName, "handle", data.VolumeHandle, "err", err)
			continue
		}
		vs := statsapi.VolumeStats{Name: data.SpecVolID, FsStats: statsapi.FsStats{Time: metav1.NewTime(m.o.Clock.Now())}}
		if data.ClaimName != "" {
			vs.PVCRef = &statsapi.PVCReference{Name: data.ClaimName, Namespace: data.ClaimNamespace}
		}
		for _, u := range resp.Usage {
			avail, total, used := uint64(u.Available), uint64(u.Total), uint64(u.Used)
			switch u.Unit {
			case csipb.VolumeUsage_BYTES:
				vs.AvailableBytes, vs.CapacityBytes, vs.UsedBytes = &avail, &total, &used
			case csipb.VolumeUsage_INODES:
				vs.InodesFree, vs.Inodes, vs.InodesUsed = &avail, &total, &used
			}
		}
		out = append(out, vs)
	}
	return out
}
