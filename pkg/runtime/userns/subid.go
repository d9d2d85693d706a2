package userns

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// kubeletUser names the node's range in /etc/subuid and /etc/subgid.
const kubeletUser = "kubelet"

// nodeRange is the node's range of IDs for pods: the kubelet entry of
// the subordinate ID files, which must agree, or every ID from perPod up.
func nodeRange(subUID, subGID string, perPod uint32) (start, length uint32, err error) {
	if subUID == "" {
		subUID = "/etc/subuid"
	}
	if subGID == "" {
		subGID = "/etc/subgid"
	}
	u, uok, err := subIDEntry(subUID)
	if err != nil {
		return 0, 0, err
	}
	g, gok, err := subIDEntry(subGID)
	if err != nil {
		return 0, 0, err
	}
	switch {
	case !uok && !gok:
		return perPod, uint32((1 << 32) - uint64(perPod)), nil
	case uok != gok || u != g:
		return 0, 0, fmt.Errorf("user namespaces: the %s entries of %s and %s differ", kubeletUser, subUID, subGID)
	}
	return u[0], u[1], nil
}

// subIDEntry reads the kubelet entry (name:start:count) of a subordinate
// ID file; a missing file has none.
func subIDEntry(path string) ([2]uint32, bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return [2]uint32{}, false, nil
	}
	if err != nil {
		return [2]uint32{}, false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(parts) != 3 || parts[0] != kubeletUser {
			continue
		}
		start, err1 := strconv.ParseUint(parts[1], 10, 32)
		count, err2 := strconv.ParseUint(parts[2], 10, 32)
		if err := errors.Join(err1, err2); err != nil {
			return [2]uint32{}, false, fmt.Errorf("user namespaces: %s: bad %s entry %q: %w", path, kubeletUser, sc.Text(), err)
		}
		return [2]uint32{uint32(start), uint32(count)}, true, nil
	}
	return [2]uint32{}, false, sc.Err()
}
