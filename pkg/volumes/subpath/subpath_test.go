package subpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// volume makes a volume directory holding a file, a directory, a link
// inside it and links planted to leave it, beside a "host" directory
// holding a secret.
func volume(t *testing.T) (root, host string) {
	t.Helper()
	base := t.TempDir()
	root, host = filepath.Join(base, "vol"), filepath.Join(base, "host")
	for _, d := range []string{root + "/dir/deeper", host} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(root, 0o770); err != nil {
		t.Fatal(err)
	}
	for file, data := range map[string]string{root + "/file": "in", host + "/secret": "host"} {
		if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, to := range map[string]string{
		"escape":      "/",
		"up":          "../host",
		"dir/updeep":  "../../host",
		"inside":      "dir/deeper",
		"dir/sibling": "../file",
		"dangling":    "/nonexistent-host-dir",
	} {
		if err := os.Symlink(to, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	return root, host
}

// Paths and links that stay inside the volume resolve to what they name.
func TestOpenInside(t *testing.T) {
	root, _ := volume(t)
	for sub, want := range map[string]string{
		"file": "file", "dir": "dir", "dir/deeper": "dir/deeper", "inside": "dir/deeper",
		"dir/sibling": "file", "dir/../file": "file", "./dir": "dir",
	} {
		f, err := Open(root, sub)
		if err != nil {
			t.Errorf("%s: %v", sub, err)
			continue
		}
		got, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
		f.Close()
		if got != filepath.Join(root, want) {
			t.Errorf("%s opened %s, want %s", sub, got, filepath.Join(root, want))
		}
	}
}

// Every way out is refused as an escape, in the last component or any
// before it, and nothing is made outside the volume on the way.
func TestOpenRefusesEscapes(t *testing.T) {
	root, host := volume(t)
	for _, sub := range []string{
		"escape", "escape/etc", "up", "up/secret", "dir/updeep/secret", "..", "../host", "dir/../../host",
		"/etc", "escape/new-dir", "up/new-dir/deeper", "dangling", "dangling/sub",
	} {
		f, err := Open(root, sub)
		if err == nil {
			f.Close()
			t.Errorf("%s: opened, want refused", sub)
			continue
		}
		if !errors.Is(err, ErrEscape) {
			t.Errorf("%s: %v, want ErrEscape", sub, err)
		}
	}
	entries, _ := os.ReadDir(host)
	if len(entries) != 1 {
		t.Errorf("the host directory now holds %d entries, want only its secret", len(entries))
	}
	if _, err := os.Stat("/nonexistent-host-dir"); err == nil {
		t.Error("a dangling link's target was created on the host")
	}
}

// A missing subPath is made, every level of it, with the volume's mode
// whatever the umask.
func TestOpenMakesMissingDirectories(t *testing.T) {
	root, _ := volume(t)
	f, err := Open(root, "a/b/c")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, d := range []string{"a", "a/b", "a/b/c"} {
		fi, err := os.Lstat(filepath.Join(root, d))
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o770 {
			t.Errorf("%s: %v, %v, want a directory with mode 0770", d, fi.Mode(), err)
		}
	}
	// Through a link inside the volume, the directory is made where the
	// link points.
	if f, err = Open(root, "inside/new"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if fi, err := os.Stat(filepath.Join(root, "dir/deeper/new")); err != nil || !fi.IsDir() {
		t.Errorf("inside/new: %v", err)
	}
}

// A path that climbs with ".." resolves while renames happen elsewhere
// on the machine: the kernel answers such a lookup EAGAIN when a rename
// ran meanwhile (it cannot then prove ".." stayed beneath the volume),
// and Open asks again. A node renames all the time (the runtime, the
// volumes' atomic writes).
func TestOpenWhileTheMachineRenames(t *testing.T) {
	root, _ := volume(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if err := os.WriteFile(a, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	renamed := make(chan int)
	go func() {
		n := 0
		defer func() { renamed <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if os.Rename(a, b) == nil && os.Rename(b, a) == nil {
				n += 2
			}
		}
	}()
	for i := 0; i < 20000; i++ {
		f, err := Open(root, "dir/../dir/sibling")
		if err != nil {
			close(stop)
			<-renamed
			t.Fatalf("lookup %d: %v", i, err)
		}
		f.Close()
	}
	close(stop)
	if n := <-renamed; n == 0 {
		t.Fatal("no rename ran beside the lookups")
	}
}

// The volume's setgid and sticky bits go to a subPath made there too, as
// upstream makes it: an fsGroup tmpfs emptyDir (dgtrwxrwxrwx) gives its
// missing subPath that mode (upstream's node e2e "nonexistent volume
// subPath should have the correct mode and owner using FSGroup").
func TestOpenKeepsSetgidAndSticky(t *testing.T) {
	root := t.TempDir()
	if err := os.Chmod(root, 0o777|os.ModeSetgid|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	f, err := Open(root, "test-sub")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	fi, err := os.Lstat(filepath.Join(root, "test-sub"))
	if want := os.ModeDir | os.ModeSetgid | os.ModeSticky | 0o777; err != nil || fi.Mode() != want {
		t.Errorf("test-sub: %v, %v, want %v", fi.Mode(), err, want)
	}
}
