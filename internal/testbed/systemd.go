package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
)

// Systemd is a real systemd (the host's systemd 252) booted as PID 1 of
// its own PID, mount and cgroup namespaces, as systemd runs in a
// container: the hosts here do not run systemd, and what talks to it (the
// systemd cgroup driver, runc's SystemdCgroup, logind's inhibitor locks)
// is tested against the real thing, never a fake.
//
// It shares the host's network and filesystems, with care:
//   - /etc, /var/lib, /var/log, /usr/bin and /usr/lib/systemd/system
//     are overlays whose writes stay in the bed's directory (kubeadm's
//     /etc/kubernetes, the kubelet's /var/lib/kubelet, logind's drop-ins,
//     a package's binary and units);
//   - /run is its own tmpfs; /tmp is shared, so test directories are seen
//     inside;
//   - every unit the host's targets pull in (tmpfiles, which would empty
//     the shared /tmp, sysctl, fstab mounts, getty, timers...) is masked
//     and the generators are hidden: only dbus, journald, logind and what
//     the tests start run;
//   - it runs in cgroups of its own below each hierarchy's root
//     (nodelet-systemd-<pid>-<n>), which the cgroup namespace makes its
//     root, and which Stop removes.
type Systemd struct {
	// Dir holds the bed's files: its log, the overlays' upper layers.
	Dir string
	// PID is systemd's process ID on the host.
	PID int

	cgroup string
	cmd    *exec.Cmd
	done   chan struct{}
}

var bootedBeds atomic.Int32

// Units a test bed starts: its target, and what that wants. Everything
// else the host's targets want is masked.
var bedUnits = []string{"dbus.socket", "dbus.service", "systemd-journald.service", "systemd-journald.socket",
	"systemd-journald-dev-log.socket", "systemd-logind.service"}

// StartSystemd boots a systemd bed and waits until its target is active
// (dbus and logind up).
func StartSystemd(ctx context.Context) (*Systemd, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the systemd test bed needs root")
	}
	dir, err := os.MkdirTemp("", "nodelet-systemd-")
	if err != nil {
		return nil, err
	}
	s := &Systemd{Dir: dir, cgroup: fmt.Sprintf("nodelet-systemd-%d-%d", os.Getpid(), bootedBeds.Add(1)), done: make(chan struct{})}
	if err := s.boot(ctx); err != nil {
		return nil, errors.Join(err, s.Stop())
	}
	return s, nil
}

// cgroupMount is one hierarchy the bed mounts again, rooted at its own
// cgroup.
type cgroupMount struct {
	dir, fstype, options string
}

func hostCgroupMounts() ([]cgroupMount, error) {
	infos, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return nil, err
	}
	var out []cgroupMount
	for _, m := range infos {
		var opts []string
		for _, o := range strings.Split(m.VFSOptions, ",") {
			if o != "rw" && o != "ro" {
				opts = append(opts, o)
			}
		}
		if len(opts) == 0 {
			opts = []string{"rw"}
		}
		out = append(out, cgroupMount{dir: m.Mountpoint, fstype: m.FSType, options: strings.Join(opts, ",")})
	}
	return out, nil
}

func (s *Systemd) boot(ctx context.Context) error {
	mounts, err := hostCgroupMounts()
	if err != nil {
		return err
	}
	var procs []string
	for _, m := range mounts {
		cg := filepath.Join(m.dir, s.cgroup)
		if err := os.MkdirAll(cg, 0o755); err != nil {
			return err
		}
		if strings.Contains(m.options, "cpuset") {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(m.dir, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(cg, f), v, 0o644); err != nil {
					return err
				}
			}
		}
		procs = append(procs, filepath.Join(cg, "cgroup.procs"))
	}
	masks, err := unitsToMask()
	if err != nil {
		return err
	}
	if err := s.writeScripts(mounts, procs, masks); err != nil {
		return err
	}
	log, err := os.OpenFile(filepath.Join(s.Dir, "systemd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	s.cmd = exec.Command("/bin/sh", filepath.Join(s.Dir, "boot.sh"))
	s.cmd.Stdout, s.cmd.Stderr = log, log
	// If the test process dies, unshare dies, and with it (--kill-child)
	// systemd and everything in its PID namespace.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		log.Close()
		return err
	}
	go func() {
		_ = s.cmd.Wait() // the bed's end shows in its log
		log.Close()
		close(s.done)
	}()
	return s.waitReady(ctx)
}

// unitsToMask are the units the host's unit directories have any target
// want, but for those the bed runs.
func unitsToMask() ([]string, error) {
	seen := map[string]bool{}
	for _, root := range []string{"/lib/systemd/system", "/usr/lib/systemd/system", "/etc/systemd/system"} {
		dirs, _ := filepath.Glob(filepath.Join(root, "*.wants"))
		more, _ := filepath.Glob(filepath.Join(root, "*.requires"))
		for _, d := range append(dirs, more...) {
			entries, err := os.ReadDir(d)
			if err != nil {
				return nil, err
			}
			for _, e := range entries {
				if !slices.Contains(bedUnits, e.Name()) {
					seen[e.Name()] = true
				}
			}
		}
	}
	// Not wanted by a target, but started on their own when present.
	for _, u := range []string{"tmp.mount", "systemd-tmpfiles-clean.timer", "systemd-tmpfiles-setup.service",
		"systemd-tmpfiles-setup-dev.service", "systemd-remount-fs.service", "systemd-journal-flush.service"} {
		seen[u] = true
	}
	out := make([]string, 0, len(seen))
	for u := range seen {
		out = append(out, u)
	}
	slices.Sort(out)
	return out, nil
}

// writeScripts writes boot.sh (on the host: into the bed's cgroups, then
// the new namespaces) and init.sh (inside: the mounts, the units, then
// exec systemd).
func (s *Systemd) writeScripts(mounts []cgroupMount, procs, masks []string) error {
	var boot strings.Builder
	boot.WriteString("set -e\n")
	for _, p := range procs {
		fmt.Fprintf(&boot, "echo $$ > %s\n", p)
	}
	fmt.Fprintf(&boot, "exec unshare --pid --mount --cgroup --fork --kill-child --propagation private /bin/sh %s\n", filepath.Join(s.Dir, "init.sh"))

	var init strings.Builder
	init.WriteString("set -e\nmount -t proc proc /proc\nmount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup\n")
	for _, m := range mounts {
		fmt.Fprintf(&init, "mkdir -p %[1]s\nmount -t %[2]s -o %[3]s %[2]s %[1]s\n", m.dir, m.fstype, m.options)
	}
	init.WriteString("mount -t tmpfs -o mode=755 run /run\nmkdir -p /run/lock\n")
	for _, d := range []string{"etc", "var/lib", "var/log", "usr/bin", "usr/lib/systemd/system"} {
		up, work := filepath.Join(s.Dir, "overlay", d, "upper"), filepath.Join(s.Dir, "overlay", d, "work")
		fmt.Fprintf(&init, "mkdir -p %[2]s %[3]s\nmount -t overlay overlay -o lowerdir=/%[1]s,upperdir=%[2]s,workdir=%[3]s /%[1]s\n", d, up, work)
	}
	init.WriteString("mount -t tmpfs -o mode=755 generators /usr/lib/systemd/system-generators\n")
	init.WriteString("mkdir -p /etc/systemd/system /etc/systemd/journald.conf.d\n")
	for _, u := range masks {
		fmt.Fprintf(&init, "rm -rf /etc/systemd/system/%[1]s; ln -s /dev/null /etc/systemd/system/%[1]s\n", u)
	}
	fmt.Fprintf(&init, "cat > /etc/systemd/system/nodelet-test.target <<'EOF'\n[Unit]\nDescription=nodelet test bed\nWants=%s\nEOF\n", strings.Join(bedUnits, " "))
	init.WriteString("printf '[Journal]\\nStorage=volatile\\n' > /etc/systemd/journald.conf.d/volatile.conf\n")
	// PrivateTmp would leave systemd-private-* directories in the shared
	// /tmp when the bed is killed.
	init.WriteString("mkdir -p /etc/systemd/system/service.d\nprintf '[Service]\\nPrivateTmp=no\\n' > /etc/systemd/system/service.d/10-nodelet-test.conf\n")
	// systemd logs to /dev/console: the bed's is its log file.
	fmt.Fprintf(&init, "mount --bind %s /dev/console\n", filepath.Join(s.Dir, "systemd.log"))
	init.WriteString("export container=nodelet-test\nexec /lib/systemd/systemd --unit=nodelet-test.target --log-target=console --log-level=info </dev/null\n")
	if err := os.WriteFile(filepath.Join(s.Dir, "boot.sh"), []byte(boot.String()), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.Dir, "init.sh"), []byte(init.String()), 0o755)
}

// waitReady finds systemd's PID (unshare's child) and waits until its
// target is active.
func (s *Systemd) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	for {
		if s.PID == 0 && s.cmd.Process != nil {
			s.PID = childOf(s.cmd.Process.Pid)
		}
		if s.PID != 0 {
			out, err := s.Command(ctx, "systemctl", "is-active", "nodelet-test.target").Output()
			if err == nil && strings.TrimSpace(string(out)) == "active" {
				return nil
			}
		}
		select {
		case <-s.done:
			return fmt.Errorf("systemd exited while booting; see %s", s.Log())
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("systemd did not boot in a minute; see %s", s.Log())
		}
		time.Sleep(100 * time.Millisecond) // poll interval
	}
}

// childOf is a process's only child, 0 until it has one.
func childOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 1 {
		return 0
	}
	child, _ := strconv.Atoi(f[0])
	return child
}

// Log is where systemd's log goes (the bed's journal has the units').
func (s *Systemd) Log() string { return filepath.Join(s.Dir, "systemd.log") }

// LogTail is the last lines of systemd's log.
func (s *Systemd) LogTail(lines int) string {
	b, _ := os.ReadFile(s.Log())
	l := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(l[max(0, len(l)-lines):], "\n")
}

// Command runs a program inside the bed (its mount, PID and cgroup
// namespaces) through nsexec, which forwards termination signals to it
// and exits as it did; SIGKILL stays with nsexec (kill the program itself,
// its only child, to crash it).
func (s *Systemd) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	nsexec, err := nsexecBinary()
	if err != nil {
		// The command fails to start, saying why.
		return exec.CommandContext(ctx, "/nonexistent/nsexec: "+err.Error())
	}
	return exec.CommandContext(ctx, nsexec, append([]string{strconv.Itoa(s.PID), name}, args...)...)
}

// nsexecBinary builds nsexec (C: it must enter a mount namespace, which a
// Go program's threads cannot) once per test process.
func nsexecBinary() (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	const key = "nsexec"
	if b, ok := built[key]; ok {
		return b.path, b.err
	}
	b := builtBinary{}
	if dir, err := os.MkdirTemp("", "nsexec-bin-"); err != nil {
		b.err = err
	} else {
		b.path = filepath.Join(dir, "nsexec")
		src := filepath.Join(RepoRoot(), "internal", "testbed", "nsexec", "nsexec.c")
		if out, err := exec.Command("gcc", "-O2", "-Wall", "-o", b.path, src).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("building nsexec: %v: %s", err, out)
		}
	}
	built[key] = b
	return b.path, b.err
}

// Systemctl runs systemctl in the bed.
func (s *Systemd) Systemctl(ctx context.Context, args ...string) (string, error) {
	out, err := s.Command(ctx, "systemctl", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("systemctl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Install copies a file of the host (under the shared /tmp, say) to dst
// inside the bed, making its directories, with mode.
func (s *Systemd) Install(ctx context.Context, src, dst string, mode os.FileMode) error {
	out, err := s.Command(ctx, "install", "-D", "-m", fmt.Sprintf("%o", mode), src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("installing %s as %s: %w: %s", src, dst, err, out)
	}
	return nil
}

// InstallData writes data to dst inside the bed, through a file in dir.
func (s *Systemd) InstallData(ctx context.Context, dir string, data []byte, dst string, mode os.FileMode) error {
	f, err := os.CreateTemp(dir, "install-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	f.Close()
	return s.Install(ctx, f.Name(), dst, mode)
}

// ReadFile reads a file inside the bed.
func (s *Systemd) ReadFile(ctx context.Context, path string) ([]byte, error) {
	return s.Command(ctx, "cat", path).Output()
}

// Journal is a unit's journal in the bed.
func (s *Systemd) Journal(ctx context.Context, unit string) string {
	out, err := s.Command(ctx, "journalctl", "-u", unit, "--no-pager", "-o", "cat").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("journalctl -u %s: %v: %s", unit, err, out)
	}
	return string(out)
}

// Running reports whether systemd still runs (a poweroff ends it).
func (s *Systemd) Running() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Wait waits for systemd to end (after a poweroff, say).
func (s *Systemd) Wait(timeout time.Duration) error {
	select {
	case <-s.done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("systemd still runs after %v", timeout)
	}
}

// CgroupPath is where a cgroup of the bed (a path as seen inside, such
// as /kubepods.slice) is in the host's hierarchy mounted at mount.
func (s *Systemd) CgroupPath(mount, cgroup string) string {
	return filepath.Join(mount, s.cgroup, cgroup)
}

// Stop kills systemd and everything in its PID namespace (the mount
// namespace and its mounts go with them), then removes its cgroups and
// files.
func (s *Systemd) Stop() error {
	if s.cmd != nil && s.cmd.Process != nil {
		if s.PID != 0 {
			_ = syscall.Kill(s.PID, syscall.SIGKILL) // fails only when it has exited
		}
		_ = s.cmd.Process.Kill() // fails only when it has exited
		<-s.done
	}
	var errs []error
	mounts, err := hostCgroupMounts()
	errs = append(errs, err)
	for _, m := range mounts {
		errs = append(errs, removeCgroupTree(filepath.Join(m.dir, s.cgroup)))
	}
	errs = append(errs, os.RemoveAll(s.Dir))
	return errors.Join(errs...)
}

// removeCgroupTree removes a cgroup directory and those below it,
// deepest first, waiting a little for killed processes to leave.
func removeCgroupTree(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		var err error
		for range 100 {
			if err = syscall.Rmdir(dirs[i]); err == nil || errors.Is(err, syscall.ENOENT) {
				err = nil
				break
			}
			time.Sleep(50 * time.Millisecond) // processes still leaving
		}
		if err != nil {
			return fmt.Errorf("removing cgroup %s: %w", dirs[i], err)
		}
	}
	return nil
}
