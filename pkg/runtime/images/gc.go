package images

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/infra/periodic"
	"github.com/nodelet/nodelet/pkg/runtime/crierr"
)

// GCPolicy says when unused images are removed: once the image
// filesystem is more than HighThresholdPercent full, until it is at most
// LowThresholdPercent full, never removing an image seen less than MinAge
// ago, one in use, or a pinned one.
type GCPolicy struct {
	HighThresholdPercent int
	LowThresholdPercent  int
	MinAge               time.Duration
	// Pinned images are never removed (the sandbox image: without it no
	// pod can start on a node that cannot pull).
	Pinned []string
}

// GCService is the part of the CRI the image garbage collector uses.
type GCService interface {
	ListImages(ctx context.Context, in *runtimeapi.ListImagesRequest, opts ...grpc.CallOption) (*runtimeapi.ListImagesResponse, error)
	RemoveImage(ctx context.Context, in *runtimeapi.RemoveImageRequest, opts ...grpc.CallOption) (*runtimeapi.RemoveImageResponse, error)
	ImageFsInfo(ctx context.Context, in *runtimeapi.ImageFsInfoRequest, opts ...grpc.CallOption) (*runtimeapi.ImageFsInfoResponse, error)
	ListContainers(ctx context.Context, in *runtimeapi.ListContainersRequest, opts ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error)
}

// GCOptions configure the image garbage collector.
type GCOptions struct {
	Runtime GCService
	Policy  GCPolicy
	// Period is how often the image filesystem is checked.
	Period time.Duration
	// Timeout bounds each runtime call.
	Timeout time.Duration
	Clock   clock.WithTicker
}

// GC removes unused images, least recently used first, when the image
// filesystem is too full. It remembers when each image was first seen and
// last used.
type GC struct {
	o GCOptions

	mu      sync.Mutex
	records map[string]*imageRecord
}

// NewGC returns an image garbage collector.
func NewGC(o GCOptions) *GC { return &GC{o: o, records: map[string]*imageRecord{}} }

// Run collects images every period until ctx ends.
func (g *GC) Run(ctx context.Context) {
	// The images are known from the start, as upstream detects them, so
	// their age (imageMinimumGCAge) counts from then: eviction under disk
	// pressure may remove those old enough before the first collection.
	if _, err := g.candidates(ctx); err != nil {
		klog.ErrorS(err, "Listing images for garbage collection failed")
	}
	periodic.Run(ctx, g.o.Clock, g.o.Period, false, func(ctx context.Context) {
		if err := g.Collect(ctx); err != nil {
			klog.ErrorS(err, "Image garbage collection failed")
		}
	})
}

func (g *GC) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, g.o.Timeout)
}

type imageRecord struct {
	firstSeen time.Time
	lastUsed  time.Time
	size      uint64
}

// fsUsage returns how full the filesystem at path is, in bytes.
func fsUsage(path string) (used, capacity uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, 0, err
	}
	capacity = st.Blocks * uint64(st.Bsize)
	return capacity - st.Bavail*uint64(st.Bsize), capacity, nil
}

// Collect removes unused images if the image filesystem is too full.
func (g *GC) Collect(ctx context.Context) error {
	p := g.o.Policy
	candidates, err := g.candidates(ctx)
	if err != nil {
		return err
	}
	mount, err := g.imageFsMount(ctx)
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
	freed, err := g.remove(ctx, candidates, toFree)
	if err == nil && freed < toFree {
		err = fmt.Errorf("freed %d bytes of images, wanted %d: the rest is in use", freed, toFree)
	}
	return err
}

// DeleteUnused removes every unused image older than the minimum age,
// whatever the thresholds: eviction asks for it under disk pressure.
func (g *GC) DeleteUnused(ctx context.Context) error {
	candidates, err := g.candidates(ctx)
	if err != nil {
		return err
	}
	freed, err := g.remove(ctx, candidates, math.MaxInt64)
	klog.InfoS("Removed unused images under disk pressure", "images", len(candidates), "bytes", freed)
	return err
}

// candidate is an image that may be removed.
type candidate struct {
	id string
	r  imageRecord
}

// candidates refreshes what is known of the images and returns those
// unused and old enough, least recently used first.
func (g *GC) candidates(ctx context.Context) ([]candidate, error) {
	now := g.o.Clock.Now()
	images, inUse, err := g.imageUsage(ctx)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, img := range images {
		r, ok := g.records[id]
		if !ok {
			r = &imageRecord{firstSeen: now}
			g.records[id] = r
		}
		r.size = img.Size
		if inUse[id] {
			r.lastUsed = now
		}
	}
	for id := range g.records {
		if _, ok := images[id]; !ok {
			delete(g.records, id)
		}
	}
	var out []candidate
	for id, r := range g.records {
		if !inUse[id] && now.Sub(r.firstSeen) >= g.o.Policy.MinAge {
			out = append(out, candidate{id, *r})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].r.lastUsed.Equal(out[j].r.lastUsed) {
			return out[i].r.lastUsed.Before(out[j].r.lastUsed)
		}
		return out[i].r.firstSeen.Before(out[j].r.firstSeen)
	})
	return out, nil
}

// remove removes candidates in order until toFree bytes are freed.
func (g *GC) remove(ctx context.Context, candidates []candidate, toFree int64) (int64, error) {
	var errs []error
	var freed int64
	for _, c := range candidates {
		if freed >= toFree {
			break
		}
		cctx, cancel := g.call(ctx)
		_, err := g.o.Runtime.RemoveImage(cctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: c.id}})
		cancel()
		if err != nil && !crierr.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("removing image %s: %w", c.id, err))
			continue
		}
		klog.InfoS("Removed unused image", "image", c.id, "size", c.r.size)
		freed += int64(c.r.size)
		g.mu.Lock()
		delete(g.records, c.id)
		g.mu.Unlock()
	}
	return freed, errors.Join(errs...)
}

// imageUsage lists the images and which of them are in use (by a
// container, or pinned).
func (g *GC) imageUsage(ctx context.Context) (map[string]*runtimeapi.Image, map[string]bool, error) {
	ctx, cancel := g.call(ctx)
	defer cancel()
	list, err := g.o.Runtime.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing images: %w", err)
	}
	containers, err := g.o.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
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
	for _, pinned := range g.o.Policy.Pinned {
		if id, ok := byName[pinned]; ok {
			inUse[id] = true
		}
	}
	return images, inUse, nil
}

func (g *GC) imageFsMount(ctx context.Context) (string, error) {
	ctx, cancel := g.call(ctx)
	defer cancel()
	info, err := g.o.Runtime.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
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
