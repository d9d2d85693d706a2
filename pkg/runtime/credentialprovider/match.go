package credentialprovider

import (
	"net/url"
	"path/filepath"
	"strings"

	"github.com/distribution/reference"
)

// Repository is an image's registry host and path, normalized as the
// runtime normalizes them ("busybox:1.36" is docker.io,
// library/busybox); ok is false for a reference that does not parse.
func Repository(image string) (host, path string, ok bool) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", "", false
	}
	return reference.Domain(named), reference.Path(named), true
}

// Match reports whether a registry glob covers an image's repository,
// and how specifically (longer is more specific). A glob is a host,
// optionally with a port and a path ("registry.example:5000/team"), whose
// host segments may be globs ("*.dkr.ecr.*.amazonaws.com": each * one
// segment); its path must be a prefix of the image's path, whole
// segments. Docker Hub's legacy names (index.docker.io,
// registry-1.docker.io) stand for docker.io. This is how the kubelet
// matches both docker config keys and credential plugins' matchImages.
func Match(glob, host, path string) (bool, int) {
	g := glob
	if !strings.Contains(g, "://") {
		g = "https://" + g
	}
	u, err := url.Parse(g)
	if err != nil {
		return false, 0
	}
	gHost, gPath := u.Host, strings.Trim(u.Path, "/")
	switch gHost {
	case "index.docker.io", "registry-1.docker.io":
		gHost = "docker.io"
		if gPath == "v1" || gPath == "v2" {
			gPath = ""
		}
	}
	if !hostMatches(gHost, host) {
		return false, 0
	}
	if gPath != "" && path != gPath && !strings.HasPrefix(path, gPath+"/") {
		return false, 0
	}
	return true, len(gHost) + len(gPath)
}

// hostMatches compares hosts segment by segment, * matching within one
// segment; ports must be equal.
func hostMatches(glob, host string) bool {
	gHost, gPort, _ := strings.Cut(glob, ":")
	hHost, hPort, _ := strings.Cut(host, ":")
	if gPort != hPort {
		return false
	}
	gs, hs := strings.Split(gHost, "."), strings.Split(hHost, ".")
	if len(gs) != len(hs) {
		return false
	}
	for i := range gs {
		if m, _ := filepath.Match(gs[i], hs[i]); !m {
			return false
		}
	}
	return true
}
