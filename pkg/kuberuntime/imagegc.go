package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/periodic"
)

// ImageGCPolicy says when unused images are removed: once the image
// filesystem is more than HighThresholdPercent full, until it is at most
// LowThresholdPercent full, never removing an image seen less than MinAge
// ago, one in use, or a pinned one.
type ImageGCPolicy struct {
	HighThresholdPercent int
	LowThresholdPercent  int
	MinAge               time.Duration
	// Pinned images are never removed (the sandbox image: without it no
	// pod can start on a node that cannot pull).
	Pinned []string
}

// imageRecords remembers when each image was first seen and last used,
// to remove the least recently used first.
type imageRecords struct {
	mu      sync.Mutex
	records map[string]*imageRecord
}

type imageRecord struct {
	firstSeen time.Time
	lastUsed  time.Time
	size      uint64
}

// fsUsage returns how full the filesystem at path is, in bytes.
var fsUsage = func(path string) (used, capacity uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, 0, err
	}
	capacity = st.Blocks * uint64(st.Bsize)
	return capacity - st.Bavail*uint64(st.Bsize), capacity, nil
}

// ImageGC removes unused images when the image filesystem is too full.
func (m *Manager) ImageGC(ctx context.Context, p ImageGCPolicy) error {
	now := m.clock.Now()
	images, inUse, err := m.imageUsage(ctx, p)
	if err != nil {
		return err
	}
	m.imageRecords.mu.Lock()
	if m.imageRecords.records == nil {
		m.imageRecords.records = map[string]*imageRecord{}
	}
	for id, img := range images {
		r, ok := m.imageRecords.records[id]
		if !ok {
			r = &imageRecord{firstSeen: now}
			m.imageRecords.records[id] = r
		}
		r.size = img.Size
		if inUse[id] {
			r.lastUsed = now
		}
	}
	for id := range m.imageRecords.records {
		if _, ok := images[id]; !ok {
			delete(m.imageRecords.records, id)
		}
	}
	type candidate struct {
		id string
		r  imageRecord
	}
	var candidates []candidate
	for id, r := range m.imageRecords.records {
		if !inUse[id] && now.Sub(r.firstSeen) >= p.MinAge {
			candidates = append(candidates, candidate{id, *r})
		}
	}
	m.imageRecords.mu.Unlock()

	mount, err := m.imageFsMount(ctx)
	if err != nil {
		return err
	}
	used, capacity, err := fsUsage(mount)
	if err != nil || capacity == 0 {
		return fmt.Errorf("measuring the image filesystem %s: %v", mount, err)
	}
	percent := int(used * 100 / capacity)
	if percent < p.HighThresholdPercent {
		return nil
	}
	toFree := int64(used) - int64(capacity)*int64(p.LowThresholdPercent)/100
	klog.InfoS("Image filesystem is above its high threshold; removing unused images", "usage", percent, "high", p.HighThresholdPercent,
		"low", p.LowThresholdPercent, "bytesToFree", toFree)
	sort.Slice(candidates, func(i, j int) bool {
		if !candidates[i].r.lastUsed.Equal(candidates[j].r.lastUsed) {
			return candidates[i].r.lastUsed.Before(candidates[j].r.lastUsed)
		}
		return candidates[i].r.firstSeen.Before(candidates[j].r.firstSeen)
	})
	var errs []error
	var freed int64
	for _, c := range candidates {
		if freed >= toFree {
			break
		}
		cctx, cancel := m.call(ctx)
		_, err := m.images.images.RemoveImage(cctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: c.id}})
		cancel()
		if err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("removing image %s: %w", c.id, err))
			continue
		}
		klog.InfoS("Removed unused image", "image", c.id, "size", c.r.size)
		freed += int64(c.r.size)
		m.imageRecords.mu.Lock()
		delete(m.imageRecords.records, c.id)
		m.imageRecords.mu.Unlock()
	}
	if freed < toFree {
		errs = append(errs, fmt.Errorf("freed %d bytes of images, wanted %d: the rest is in use", freed, toFree))
	}
	return errors.Join(errs...)
}

// imageUsage lists the images and which of them are in use (by a
// container, or pinned).
func (m *Manager) imageUsage(ctx context.Context, p ImageGCPolicy) (map[string]*runtimeapi.Image, map[string]bool, error) {
	ctx, cancel := m.call(ctx)
	defer cancel()
	list, err := m.images.images.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing images: %w", err)
	}
	containers, err := m.runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing containers: %w", err)
	}
	images := map[string]*runtimeapi.Image{}
	inUse := map[string]bool{}
	byName := map[string]string{}
	for _, img := range list.GetImages() {
		images[img.Id] = img
		if img.Pinned {
			inUse[img.Id] = true
		}
		for _, t := range append(img.RepoTags, img.RepoDigests...) {
			byName[t] = img.Id
		}
	}
	for _, c := range containers.GetContainers() {
		inUse[c.ImageRef] = true
		inUse[c.GetImage().GetImage()] = true
		if id, ok := byName[c.GetImage().GetImage()]; ok {
			inUse[id] = true
		}
	}
	for _, pinned := range p.Pinned {
		if id, ok := byName[pinned]; ok {
			inUse[id] = true
		}
	}
	return images, inUse, nil
}

func (m *Manager) imageFsMount(ctx context.Context) (string, error) {
	ctx, cancel := m.call(ctx)
	defer cancel()
	info, err := m.images.images.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
	if err != nil {
		return "", fmt.Errorf("image filesystem info: %w", err)
	}
	for _, fs := range info.GetImageFilesystems() {
		if mp := fs.GetFsId().GetMountpoint(); mp != "" {
			return mp, nil
		}
	}
	return "", fmt.Errorf("the runtime reports no image filesystem")
}

// RunImageGC collects images every period until ctx ends.
func (m *Manager) RunImageGC(ctx context.Context, p ImageGCPolicy, period time.Duration) {
	periodic.Run(ctx, m.clock, period, false, func(ctx context.Context) {
		if err := m.ImageGC(ctx, p); err != nil {
			klog.ErrorS(err, "Image garbage collection failed")
		}
	})
}
