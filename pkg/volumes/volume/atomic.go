package volume

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// File is one file of a volume whose content nodelet writes (configMap,
// secret, downwardAPI, projected).
type File struct {
	Data []byte
	Mode os.FileMode
	// UID and GID own the file; -1 leaves root's. GID is the pod's
	// fsGroup, which also owns the directories.
	UID, GID int
}

// file is a root-owned File.
func file(data []byte, mode os.FileMode) File { return File{Data: data, Mode: mode, UID: -1, GID: -1} }

// dataDir is the symlink through which a volume's files are reached; it
// is swapped in one rename, so a reader sees the old set of files or the
// new one, never a mix (upstream's atomic writer layout, which programs
// watching ..data rely on).
const (
	dataDir    = "..data"
	dataDirTmp = "..data_tmp"
)

// writeFiles makes dir hold exactly files (paths relative to dir). Nothing
// is written when the content is already there. It reports whether it
// changed anything.
func writeFiles(dir string, files map[string]File) (bool, error) {
	for p := range files {
		if err := validPath(p); err != nil {
			return false, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	old, _ := os.Readlink(filepath.Join(dir, dataDir))
	if old != "" && sameContent(filepath.Join(dir, old), files) {
		return false, nil
	}
	ts, err := os.MkdirTemp(dir, ".."+time.Now().UTC().Format("2006_01_02_15_04_05."))
	if err != nil {
		return false, err
	}
	if err := os.Chmod(ts, 0o755); err != nil {
		return false, err
	}
	gid := -1
	for _, f := range files {
		gid = max(gid, f.GID)
	}
	for _, d := range []string{dir, ts} {
		if err := ownedBy(d, -1, gid, groupRead); err != nil {
			return false, err
		}
	}
	for p, f := range files {
		full := filepath.Join(ts, p)
		for d := filepath.Dir(full); d != ts; d = filepath.Dir(d) {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return false, err
			}
			if err := ownedBy(d, -1, gid, groupRead); err != nil {
				return false, err
			}
		}
		if err := os.WriteFile(full, f.Data, f.Mode); err != nil {
			return false, err
		}
		// WriteFile's mode is subject to the umask.
		if err := os.Chmod(full, f.Mode); err != nil {
			return false, err
		}
		if err := ownedBy(full, f.UID, f.GID, 0); err != nil {
			return false, err
		}
	}
	tmpLink := filepath.Join(dir, dataDirTmp)
	os.Remove(tmpLink)
	if err := os.Symlink(filepath.Base(ts), tmpLink); err != nil {
		return false, err
	}
	if err := os.Rename(tmpLink, filepath.Join(dir, dataDir)); err != nil {
		return false, err
	}
	// Each top-level name is a symlink into ..data; names no longer in
	// the payload go.
	top := map[string]bool{}
	for p := range files {
		top[strings.Split(p, string(filepath.Separator))[0]] = true
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, "..") {
			if name != dataDir && name != filepath.Base(ts) && e.IsDir() {
				errs = append(errs, os.RemoveAll(filepath.Join(dir, name)))
			}
			continue
		}
		if !top[name] {
			errs = append(errs, os.RemoveAll(filepath.Join(dir, name)))
		}
	}
	for name := range top {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		errs = append(errs, os.Symlink(filepath.Join(dataDir, name), link))
	}
	return true, errors.Join(errs...)
}

// sameContent tells whether dir holds exactly files.
func sameContent(dir string, files map[string]File) bool {
	n := 0
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		f, ok := files[rel]
		if !ok {
			return errStop
		}
		info, err := d.Info()
		if err != nil || info.Mode().Perm() != f.Mode.Perm() {
			return errStop
		}
		if uid, gid := owner(info); uid != max(f.UID, 0) || gid != max(f.GID, 0) {
			return errStop
		}
		b, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(b, f.Data) {
			return errStop
		}
		n++
		return nil
	})
	return err == nil && n == len(files)
}

var errStop = errors.New("differs")

// validPath refuses paths that could leave the volume or clash with the
// writer's own names.
func validPath(p string) error {
	clean := filepath.Clean(p)
	if p == "" || filepath.IsAbs(p) || clean != p || clean == ".." || strings.HasPrefix(clean, "../") || strings.HasPrefix(clean, "..") {
		return fmt.Errorf("path %q must be relative, clean, inside the volume and not start with '..'", p)
	}
	return nil
}
