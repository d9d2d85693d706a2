// Command mkimage builds the container images nodelet's demo and tests use,
// from binaries already on this machine, because no registry is reachable.
//
// The images are written as one docker-archive tarball that
// `ctr -n k8s.io images import` accepts. File times are fixed so that the
// same inputs always give the same digests: re-running setup is a no-op for
// containerd.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Image names the demo and the tests refer to.
const (
	PauseImage   = "registry.k8s.io/pause:3.10"
	BusyboxImage = "docker.io/library/busybox:1.36"
	// BusyboxLatest exists so that ":latest" references resolve locally.
	BusyboxLatest = "docker.io/library/busybox:latest"
	// NonRootImage runs as uid 65534 by default (runAsNonRoot tests).
	NonRootImage = "docker.io/library/busybox:nonroot"
	// GRPCHealthImage serves the gRPC health service (probe tests).
	GRPCHealthImage = "nodelet.test/grpchealth:1"
)

var epoch = time.Unix(0, 0).UTC()

// time0 leaves a tar header's access and change times out.
var time0 time.Time

type file struct {
	name     string
	mode     int64
	data     []byte
	linkname string // symlink target when set
	dir      bool
}

func main() {
	out := flag.String("out", "", "output tarball path")
	pause := flag.String("pause", "", "path of the static pause binary")
	busybox := flag.String("busybox", "/bin/busybox", "path of a static busybox binary")
	grpcHealth := flag.String("grpchealth", "", "path of the static grpchealth binary (optional)")
	euid := flag.String("euid", "", "path of the static euid binary, installed setuid root (optional)")
	var e2e e2eInputs
	flag.StringVar(&e2e.out, "e2e-out", "", "also write the node e2e suite's images to this tarball (hack/nodeconformance)")
	flag.StringVar(&e2e.debianBase, "debian-base", "", "with -e2e-out: the Debian root filesystem tarball")
	flag.StringVar(&e2e.agnhost, "agnhost", "", "with -e2e-out: the agnhost binary")
	flag.StringVar(&e2e.nnp, "nnp", "", "with -e2e-out: nonewprivs' nnp binary")
	flag.StringVar(&e2e.porterCert, "porter-cert", "", "with -e2e-out: agnhost porter's localhost.crt")
	flag.StringVar(&e2e.porterKey, "porter-key", "", "with -e2e-out: agnhost porter's localhost.key")
	flag.Parse()
	if (*out == "" && e2e.out == "") || *pause == "" {
		fmt.Fprintln(os.Stderr, "usage: mkimage -out images.tar -pause ./pause [-busybox /bin/busybox]; or mkimage -e2e-out e2e-images.tar -pause ./pause ...")
		os.Exit(2)
	}
	if *out != "" {
		if err := run(*out, *pause, *busybox, *grpcHealth, *euid); err != nil {
			fmt.Fprintln(os.Stderr, "mkimage:", err)
			os.Exit(1)
		}
	}
	if e2e.out != "" {
		e2e.busybox, e2e.pause = *busybox, *pause
		if err := buildE2E(e2e); err != nil {
			fmt.Fprintln(os.Stderr, "mkimage: e2e images:", err)
			os.Exit(1)
		}
	}
}

func run(out, pausePath, busyboxPath, grpcHealthPath, euidPath string) error {
	pauseBin, err := os.ReadFile(pausePath)
	if err != nil {
		return err
	}
	pauseImg, err := image([]file{{name: "pause", mode: 0o755, data: pauseBin}}, v1.Config{
		Entrypoint: []string{"/pause"},
		User:       "65535:65535",
	})
	if err != nil {
		return err
	}

	bbFiles, err := busyboxFiles(busyboxPath)
	if err != nil {
		return err
	}
	if euidPath != "" {
		bin, err := os.ReadFile(euidPath)
		if err != nil {
			return err
		}
		bbFiles = append(bbFiles, file{name: "usr/bin/euid", mode: 0o4755, data: bin})
	}
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	bbImg, err := image(bbFiles, v1.Config{Cmd: []string{"sh"}, Env: env})
	if err != nil {
		return err
	}
	nonRootImg, err := image(bbFiles, v1.Config{Cmd: []string{"sh"}, Env: env, User: "65534"})
	if err != nil {
		return err
	}

	images := map[string]v1.Image{
		PauseImage: pauseImg, BusyboxImage: bbImg, BusyboxLatest: bbImg, NonRootImage: nonRootImg,
	}
	if grpcHealthPath != "" {
		bin, err := os.ReadFile(grpcHealthPath)
		if err != nil {
			return err
		}
		files := append(append([]file(nil), bbFiles...), file{name: "grpchealth", mode: 0o755, data: bin})
		img, err := image(files, v1.Config{Entrypoint: []string{"/grpchealth"}, Env: env})
		if err != nil {
			return err
		}
		images[GRPCHealthImage] = img
	}
	refs := map[name.Reference]v1.Image{}
	for ref, img := range images {
		tag, err := name.NewTag(ref)
		if err != nil {
			return err
		}
		refs[tag] = img
	}
	return tarball.MultiRefWriteToFile(out, refs)
}

// busyboxFiles lays out a minimal userland: every applet as a symlink in
// /bin, the users tests run as, and the usual writable directories.
func busyboxFiles(path string) ([]file, error) {
	bin, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	list, err := exec.Command(path, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", path, err)
	}
	files := []file{
		{name: "bin", dir: true, mode: 0o755},
		{name: "bin/busybox", mode: 0o755, data: bin},
		{name: "etc", dir: true, mode: 0o755},
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnogroup:x:65534:\n")},
		{name: "root", dir: true, mode: 0o700},
		{name: "tmp", dir: true, mode: 0o1777},
		{name: "usr", dir: true, mode: 0o755},
		{name: "usr/bin", dir: true, mode: 0o755},
		{name: "var", dir: true, mode: 0o755},
		{name: "sbin", linkname: "bin"},
	}
	applets := strings.Fields(string(list))
	sort.Strings(applets)
	for _, a := range applets {
		if a == "busybox" {
			continue
		}
		files = append(files, file{name: "bin/" + a, linkname: "busybox"})
	}
	return files, nil
}

func image(files []file, cfg v1.Config) (v1.Image, error) {
	return withFiles(empty.Image, files, cfg)
}

// filesLayer is one image layer holding files, with fixed times.
func filesLayer(files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, ModTime: epoch, Format: tar.FormatPAX}
		switch {
		case f.dir:
			h.Typeflag, h.Name = tar.TypeDir, f.name+"/"
		case f.linkname != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.linkname, 0o777
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layerBytes := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	})
}
