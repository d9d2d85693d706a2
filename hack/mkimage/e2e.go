package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The images upstream's node e2e suite runs, under the names of its
// test/utils/image manifest (v1.37). No registry is reachable, so each is
// rebuilt here from what its upstream Dockerfile puts in it:
//   - busybox and nonewprivs: upstream's are busybox and Alpine images;
//     here a static busybox 1.37.0 (upstream's version, built from
//     Debian's source archive) with every applet;
//   - agnhost, nginx, ipc-utils, glibc-dns-testing, nonroot: one Debian
//     12 layer (debootstrapped from Debian's packages by
//     hack/nodeconformance/build.sh: curl, netcat-openbsd, iproute2,
//     socat, dnsutils, nginx-light, util-linux), shared by
//     all five, and a small layer of each image's own. Upstream's Alpine
//     images run busybox's sh and applets, which the suite's scripts rely
//     on (nmeter, for one): /bin/sh is busybox there, and every applet
//     Debian lacks is linked to it;
//   - agnhost itself and nonewprivs' nnp are built from the pinned
//     k8s.io/kubernetes module (hack/cluster/tools).
const e2eRegistry = "registry.k8s.io/e2e-test-images/"

// e2eInputs are the binaries and the Debian root filesystem the e2e
// images are made of.
type e2eInputs struct {
	out, debianBase, busybox, agnhost, nnp, pause string
	porterCert, porterKey                         string
}

func buildE2E(in e2eInputs) error {
	bbFiles, err := busyboxFiles(in.busybox)
	if err != nil {
		return err
	}
	bbFiles = withOfficialBusyboxUsers(bbFiles)
	base, err := debianLayer(in.debianBase)
	if err != nil {
		return err
	}
	baseEtc, baseBins, err := debianIndex(in.debianBase)
	if err != nil {
		return err
	}
	read := func(p string) ([]byte, error) { return os.ReadFile(p) }
	agnhostBin, err := read(in.agnhost)
	if err != nil {
		return err
	}
	nnpBin, err := read(in.nnp)
	if err != nil {
		return err
	}
	pauseBin, err := read(in.pause)
	if err != nil {
		return err
	}
	cert, err := read(in.porterCert)
	if err != nil {
		return err
	}
	key, err := read(in.porterKey)
	if err != nil {
		return err
	}
	alpineEnv := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	bbBin, err := read(in.busybox)
	if err != nil {
		return err
	}
	busyboxish := alpineShell(baseBins, in.busybox, bbBin)

	images := map[string]struct {
		base  v1.Layer // nil: the image is its own files only
		files []file
		cfg   v1.Config
	}{
		e2eRegistry + "busybox:1.37.0-2": {files: bbFiles, cfg: v1.Config{Cmd: []string{"sh"}, Env: alpineEnv}},
		e2eRegistry + "nonewprivs:1.4": {files: append(append([]file(nil), bbFiles...),
			file{name: "usr/local", dir: true, mode: 0o755}, file{name: "usr/local/bin", dir: true, mode: 0o755},
			file{name: "usr/local/bin/nnp", mode: 0o4755, data: nnpBin}),
			cfg: v1.Config{Cmd: []string{"nnp"}, Env: alpineEnv}},
		e2eRegistry + "agnhost:2.66.1": {base: base, files: agnhostFiles(baseEtc, busyboxish, agnhostBin, cert, key),
			cfg: v1.Config{Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}, Env: alpineEnv,
				ExposedPorts: ports(80, 8080, 8081, 9376, 5000)}},
		// The suite's "previous" agnhost differs only in its tag; a label
		// keeps its image ID its own.
		e2eRegistry + "agnhost:2.55": {base: base, files: agnhostFiles(baseEtc, busyboxish, agnhostBin, cert, key),
			cfg: v1.Config{Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}, Env: alpineEnv,
				Labels: map[string]string{"nodelet.test/agnhost": "2.55"}}},
		e2eRegistry + "nginx:1.27.0-2": {base: base, files: append(busyboxish, nginxFiles()...),
			cfg: v1.Config{Cmd: []string{"nginx", "-g", "daemon off;"}, Env: alpineEnv,
				ExposedPorts: ports(80), StopSignal: "SIGQUIT"}},
		e2eRegistry + "ipc-utils:1.4":           {base: base, files: busyboxish, cfg: v1.Config{Cmd: []string{"/bin/sh"}, Env: alpineEnv}},
		e2eRegistry + "glibc-dns-testing:2.1.1": {base: base, cfg: v1.Config{Cmd: []string{"bash"}, Env: alpineEnv}},
		e2eRegistry + "nonroot:1.5":             {base: base, cfg: v1.Config{Cmd: []string{"bash"}, Env: alpineEnv, User: "1234"}},
		"registry.k8s.io/pause:3.10.2": {files: []file{{name: "pause", mode: 0o755, data: pauseBin}},
			cfg: v1.Config{Entrypoint: []string{"/pause"}, User: "65535:65535"}},
	}
	refs := map[name.Reference]v1.Image{}
	for ref, spec := range images {
		img := empty.Image
		if spec.base != nil {
			if img, err = mutate.AppendLayers(img, spec.base); err != nil {
				return err
			}
		}
		if img, err = withFiles(img, spec.files, spec.cfg); err != nil {
			return fmt.Errorf("%s: %w", ref, err)
		}
		tag, err := name.NewTag(ref)
		if err != nil {
			return err
		}
		refs[tag] = img
	}
	return tarball.MultiRefWriteToFile(in.out, refs)
}

func ports(ps ...int) map[string]struct{} {
	m := map[string]struct{}{}
	for _, p := range ps {
		m[fmt.Sprintf("%d/tcp", p)] = struct{}{}
	}
	return m
}

// withOfficialBusyboxUsers gives the busybox files the users and groups of
// the official busybox image, which the suite's security specs run as.
func withOfficialBusyboxUsers(files []file) []file {
	out := make([]file, 0, len(files))
	for _, f := range files {
		switch f.name {
		case "etc/passwd":
			f.data = []byte("root:x:0:0:root:/root:/bin/sh\ndaemon:x:1:1:daemon:/usr/sbin:/bin/false\nbin:x:2:2:bin:/bin:/bin/false\n" +
				"sys:x:3:3:sys:/dev:/bin/false\nsync:x:4:100:sync:/bin:/bin/sync\nmail:x:8:8:mail:/var/spool/mail:/bin/false\n" +
				"www-data:x:33:33:www-data:/var/www:/bin/false\noperator:x:37:37:Operator:/var:/bin/false\nnobody:x:65534:65534:nobody:/home:/bin/false\n")
		case "etc/group":
			f.data = []byte("root:x:0:\ndaemon:x:1:\nbin:x:2:\nsys:x:3:\nadm:x:4:\ntty:x:5:\ndisk:x:6:\nwheel:x:10:root\n" +
				"mail:x:12:\nwww-data:x:33:\noperator:x:37:\nusers:x:100:\nnogroup:x:65534:\n")
		}
		out = append(out, f)
	}
	return out
}

// agnhostFiles are agnhost's own layer, as its Dockerfile adds it: the
// binary and its agnhost-2 link, porter's certificate, /uploads, and the
// user and group the supplemental-groups specs look for (uid 1000 in gid
// 50000).
func agnhostFiles(etc map[string][]byte, busyboxish []file, bin, cert, key []byte) []file {
	passwd := string(etc["etc/passwd"]) + "user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n"
	group := string(etc["etc/group"]) + "user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n"
	files := append([]file(nil), busyboxish...)
	return append(files,
		file{name: "agnhost", mode: 0o755, data: bin},
		file{name: "agnhost-2", linkname: "agnhost"},
		file{name: "localhost.crt", mode: 0o644, data: cert},
		file{name: "localhost.key", mode: 0o600, data: key},
		file{name: "uploads", dir: true, mode: 0o755},
		file{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		file{name: "etc/group", mode: 0o644, data: []byte(group)},
		file{name: "home", dir: true, mode: 0o755},
		file{name: "home/user-defined-in-image", dir: true, mode: 0o755},
	)
}

// nginxFiles configure Debian's nginx as the official nginx image runs:
// in the foreground (its command says so), serving :80, its pid in
// /var/run/nginx.pid, logging to the container's stdout and stderr.
func nginxFiles() []file {
	conf := `user www-data;
worker_processes auto;
pid /var/run/nginx.pid;
error_log /dev/stderr notice;
events { worker_connections 1024; }
http {
	include /etc/nginx/mime.types;
	default_type application/octet-stream;
	access_log /dev/stdout;
	sendfile on;
	server {
		listen 80;
		listen [::]:80;
		server_name localhost;
		location / { root /usr/share/nginx/html; index index.html; }
	}
}
`
	return []file{
		{name: "etc/nginx/nginx.conf", mode: 0o644, data: []byte(conf)},
		{name: "usr/share/nginx", dir: true, mode: 0o755},
		{name: "usr/share/nginx/html", dir: true, mode: 0o755},
		{name: "usr/share/nginx/html/index.html", mode: 0o644, data: []byte("<!DOCTYPE html>\n<html><head><title>Welcome to nginx!</title></head><body><h1>Welcome to nginx!</h1></body></html>\n")},
	}
}

// alpineShell makes a Debian root filesystem run scripts as an Alpine one
// does: /bin/sh is busybox's ash, and every applet Debian has no command
// for (nmeter, say) is a link to busybox in /usr/local/bin.
func alpineShell(debianBins map[string]bool, busyboxPath string, busybox []byte) []file {
	files := []file{
		{name: "usr/bin/busybox", mode: 0o755, data: busybox},
		{name: "usr/bin/sh", linkname: "busybox"},
		{name: "usr/local", dir: true, mode: 0o755},
		{name: "usr/local/bin", dir: true, mode: 0o755},
	}
	for _, a := range applets(busyboxPath) {
		if !debianBins[a] {
			files = append(files, file{name: "usr/local/bin/" + a, linkname: "/usr/bin/busybox"})
		}
	}
	return files
}

func applets(busyboxPath string) []string {
	bb, err := busyboxFiles(busyboxPath)
	if err != nil {
		return nil
	}
	var out []string
	for _, f := range bb {
		if f.linkname == "busybox" {
			out = append(out, path.Base(f.name))
		}
	}
	sort.Strings(out)
	return out
}

// debianLayer is the Debian root filesystem tarball as one layer: device
// nodes are left out (the runtime makes /dev), and names lose their "./".
func debianLayer(tarPath string) (v1.Layer, error) {
	var buf bytes.Buffer
	if err := filterTar(tarPath, &buf); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}

func filterTar(tarPath string, w io.Writer) error {
	f, err := os.Open(tarPath)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(bufio.NewReader(f))
	tw := tar.NewWriter(w)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", tarPath, err)
		}
		h.Name = strings.TrimPrefix(h.Name, "./")
		if h.Name == "" || h.Typeflag == tar.TypeChar || h.Typeflag == tar.TypeBlock || h.Typeflag == tar.TypeFifo ||
			(strings.HasPrefix(h.Name, "dev/") && h.Name != "dev/") {
			continue
		}
		h.Linkname = strings.TrimPrefix(h.Linkname, "./")
		h.ModTime, h.AccessTime, h.ChangeTime = epoch, time0, time0
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
	return tw.Close()
}

// debianIndex reads the files the image layers above the Debian one
// extend (/etc/passwd, /etc/group), and the commands it has.
func debianIndex(tarPath string) (map[string][]byte, map[string]bool, error) {
	f, err := os.Open(tarPath)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	etc, bins := map[string][]byte{}, map[string]bool{}
	tr := tar.NewReader(bufio.NewReader(f))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return etc, bins, nil
		}
		if err != nil {
			return nil, nil, err
		}
		n := strings.TrimPrefix(h.Name, "./")
		switch dir := path.Dir(n); {
		case n == "etc/passwd" || n == "etc/group":
			if etc[n], err = io.ReadAll(tr); err != nil {
				return nil, nil, err
			}
		case dir == "usr/bin" || dir == "usr/sbin" || dir == "bin" || dir == "sbin":
			bins[path.Base(n)] = true
		}
	}
}

// withFiles adds one layer of files (none: only the config) and sets the
// image's config.
func withFiles(img v1.Image, files []file, cfg v1.Config) (v1.Image, error) {
	if len(files) > 0 {
		layer, err := filesLayer(files)
		if err != nil {
			return nil, err
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: epoch}
	cf.Config = cfg
	return mutate.ConfigFile(img, cf)
}
