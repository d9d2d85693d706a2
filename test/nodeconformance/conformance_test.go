//go:build integration

package nodeconformance

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/testbed"
)

const (
	// apiServer is where the suite's API server listens (its default).
	apiServer = "https://127.0.0.1:6443"
	// rootDir is the suite's kubelet root directory: it reads the
	// pod-resources and device-plugins sockets there.
	rootDir = "/var/lib/kubelet"
	// The specs a node conformance run selects, as upstream's node e2e CI
	// selects them outside its serial jobs.
	focus = `\[NodeConformance\]`
	skip  = `\[Serial\]|\[Slow\]|\[Disruptive\]|\[Flaky\]`
)

// mirrored are the registries whose images the suite names; the test's
// registry stands in for them. Others (invalid.registry.k8s.io, which
// specs use to fail a pull) fail as they would anywhere.
var mirrored = []string{"registry.k8s.io", "gcr.io", "docker.io"}

// TestNodeConformance runs the suite's selected specs against the agent
// and fails if one fails that the upstream kubelet passes here
// (testdata/upstream-failures.txt lists those it fails, with the reason).
func TestNodeConformance(t *testing.T) {
	if *modeFlag != "conformance" && *modeFlag != "harness" {
		t.Fatalf("-conformance.mode=%q: want conformance or harness", *modeFlag)
	}
	suite := suiteBinaries(t)
	cd := startRuntime(t, suite)
	claimRootDir(t)
	agent := newAgent(t, *agentFlag, suite, cd)

	r := &suiteRun{t: t, suite: suite, cd: cd, agent: agent, work: t.TempDir(), token: randomToken(t)}
	r.reportDir = filepath.Join(r.work, "report")
	specs := r.run()

	upstreamFails, err := readList("testdata/upstream-failures.txt")
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + summary(agent.name, specs))
	// The reports are kept whatever the outcome (ginkgo's JUnit report
	// for CI systems, its JSON report for this test's lists).
	testbed.KeepLogs(t, filepath.Join(r.reportDir, "junit.xml"), filepath.Join(r.reportDir, "report.json"))
	_, failed, _ := tally(specs)
	var regressions []string
	for _, s := range failed {
		if _, known := upstreamFails[s.name()]; !known {
			regressions = append(regressions, s.name())
		}
	}
	if agent.name == "upstream" {
		// The list is the bar: a spec upstream passes here again leaves it.
		passed, _, _ := tally(specs)
		for _, s := range passed {
			if _, listed := upstreamFails[s.name()]; listed {
				t.Errorf("the upstream kubelet passes %q: take it off testdata/upstream-failures.txt", s.name())
			}
		}
	}
	if len(specs) == 0 {
		t.Fatal("the suite reported no spec")
	}
	if len(regressions) > 0 {
		agent.keepLogs()
		testbed.KeepLogs(t, filepath.Join(r.work, "suite.log"))
		if agent.name == "upstream" {
			t.Fatalf("the upstream kubelet failed %d specs not in testdata/upstream-failures.txt (each it fails here belongs there, with its reason):\n  %s", len(regressions), strings.Join(regressions, "\n  "))
		}
		t.Fatalf("%s failed %d specs that the upstream kubelet passes here:\n  %s", agent.name, len(regressions), strings.Join(regressions, "\n  "))
	}
}

// suiteBinaries builds (or finds cached) what the run needs and returns
// its directory.
func suiteBinaries(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(testbed.RepoRoot(), "hack", "nodeconformance", "build.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/nodeconformance/build.sh: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// startRuntime starts the test's containerd, with the suite's images
// served under their upstream names, and pulls them as the suite's
// pre-pull would (its specs mostly run them with imagePullPolicy Never).
func startRuntime(t *testing.T, suite string) *testbed.Containerd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cd, err := testbed.StartContainerd(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Last, once containerd has removed every sandbox: the pods' cgroups.
	t.Cleanup(func() { testbed.RemoveCgroupRoot("/kubepods") })
	t.Cleanup(func() {
		if err := cd.Stop(); err != nil {
			t.Errorf("stopping containerd: %v", err)
		}
	})
	reg := testbed.StartRegistry(t, cd)
	reg.Mirror(t, cd, mirrored...)
	for _, image := range reg.PushTarball(t, filepath.Join(suite, "images.tar")) {
		if _, err := cd.Images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}}); err != nil {
			t.Fatalf("pulling %s through the mirror: %v", image, err)
		}
	}
	return cd
}

// claimRootDir gives the run an empty /var/lib/kubelet, bind-mounted over
// whatever is there and unmounted at the end, so a node's own kubelet
// directory is never touched.
func claimRootDir(t *testing.T) {
	t.Helper()
	if err := os.MkdirAll(rootDir, 0o755); err != nil {
		t.Fatal(err)
	}
	before := layers(t)
	fresh := t.TempDir()
	if err := unix.Mount(fresh, rootDir, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("mounting a fresh %s: %v", rootDir, err)
	}
	// Shared, as it is on a node whose init is systemd (which makes
	// every mount shared): on these hosts / is private, and an agent
	// would stack a shared mount of its own on the test's private one.
	if err := unix.Mount("", rootDir, "", unix.MS_SHARED, ""); err != nil {
		t.Fatalf("making %s shared: %v", rootDir, err)
	}
	t.Cleanup(func() {
		// Pod volumes (tmpfs, binds) sit below it, and the agent made it a
		// shared mount by mounting it on itself (both agents do); the
		// agent and its pods are gone by now. Detach every layer down to
		// the node's own directory.
		for layers(t) > before {
			if err := unix.Unmount(rootDir, unix.MNT_DETACH); err != nil {
				t.Errorf("unmounting %s: %v", rootDir, err)
				break
			}
		}
	})
}

// layers counts the mounts stacked on rootDir.
func layers(t *testing.T) int {
	infos, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) { return m.Mountpoint != rootDir, false })
	if err != nil {
		t.Fatal(err)
	}
	return len(infos)
}

func randomToken(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// suiteRun is one run of the suite.
type suiteRun struct {
	t         *testing.T
	suite     string
	cd        *testbed.Containerd
	agent     *agent
	work      string
	reportDir string
	token     string
	// suiteName is the suite's description; names the specs selected.
	suiteName string
	names     map[string]string
}

// run runs the selected specs and returns what the suite reported.
func (r *suiteRun) run() []specResult {
	t := r.t
	if err := os.MkdirAll(r.reportDir, 0o755); err != nil {
		t.Fatal(err)
	}
	r.suiteName, r.names = r.selected()
	cmd := r.command()
	logPath := filepath.Join(r.work, "suite.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = r.work
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	started := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	if *modeFlag == "conformance" {
		r.startAgentOnceServing(done)
	}
	suiteErr := <-done
	t.Logf("the suite ran for %v (%v); its log: %s", time.Since(started).Round(time.Second), suiteErr, logPath)
	reported, setup, err := readReport(filepath.Join(r.reportDir, "report.json"))
	if err != nil {
		testbed.KeepLogs(t, logPath)
		r.agent.keepLogs()
		t.Fatalf("the suite left no report (%v); its log's end:\n%s", err, tail(logPath, 80))
	}
	if suiteErr != nil && !strings.Contains(tail(logPath, 40), "Test Suite Failed") {
		// Failed specs end the suite with an error too; anything else
		// (a set-up node failing, say) is the run's own failure.
		testbed.KeepLogs(t, logPath)
		r.agent.keepLogs()
		t.Fatalf("the suite failed to run: %v; its log's end:\n%s", suiteErr, tail(logPath, 80))
	}
	if _, failed, _ := tally(setup); len(failed) > 0 {
		testbed.KeepLogs(t, logPath)
		r.agent.keepLogs()
		t.Fatalf("the suite's set-up failed (%s: %s); its log's end:\n%s", failed[0].LeafNodeType, failed[0].Failure.Message, tail(logPath, 80))
	}
	// The report lists every spec of the suite; those not selected are
	// skipped there, and not counted here.
	var specs []specResult
	for _, s := range reported {
		if _, ok := r.names[s.name()]; ok {
			specs = append(specs, s)
		}
	}
	if len(specs) != len(r.names) {
		testbed.KeepLogs(t, logPath)
		t.Errorf("the suite reported %d of the %d specs selected; its log's end:\n%s", len(specs), len(r.names), tail(logPath, 40))
	}
	return specs
}

// command is ginkgo running the suite: in parallel, with a JSON report,
// and in conformance mode in a mount namespace of its own where /rootfs is
// the host's root (the suite's system validation reads the host there, as
// in upstream's node test container).
func (r *suiteRun) command() *exec.Cmd {
	t := r.t
	ginkgoArgs := []string{
		fmt.Sprintf("--nodes=%d", *nodesFlag), "--timeout=" + r.suiteTimeout().String(), "--no-color", "--poll-progress-after=5m",
		"--output-dir=" + r.reportDir, "--json-report=report.json", "--junit-report=junit.xml",
		// One regular expression naming exactly the specs to run: ginkgo
		// ORs repeated --focus flags, so a narrower selection cannot be
		// laid over the suite's.
		"--focus=" + focusOf(r.suiteName, r.names), "--skip=" + skip,
	}
	suiteArgs := []string{
		"--bearer-token=" + r.token, "--report-dir=" + r.reportDir,
		"--container-runtime-endpoint=" + r.cd.Endpoint, "--image-service-endpoint=" + r.cd.Endpoint,
		"--prepull-images=false", "--v=4",
	}
	args := append(append(append(ginkgoArgs, r.agent.suiteBinary(), "--"), suiteArgs...), r.agent.harnessArgs(r.work)...)
	ginkgo := filepath.Join(r.suite, "ginkgo")
	if *modeFlag == "harness" {
		cmd := exec.Command(ginkgo, args...)
		cmd.Env = append(os.Environ(), "PATH="+pathWithout(t, "systemd-run"))
		return cmd
	}
	args = append(args, "--conformance=true")
	rootfs := ensureRootfs(t)
	script := fmt.Sprintf(`mount --rbind / %s && exec "$@"`, rootfs)
	return exec.Command("unshare", append([]string{"--mount", "--propagation", "slave", "--", "sh", "-c", script, "sh", ginkgo}, args...)...)
}

// suiteTimeout leaves the test, once ginkgo has given up, five minutes to
// read the report and tear the node down before go test's own timeout.
func (r *suiteRun) suiteTimeout() time.Duration {
	deadline, ok := r.t.Deadline()
	if !ok {
		return 4 * time.Hour
	}
	return time.Until(deadline) - 5*time.Minute
}

// selected names the specs to run: those the suite's own focus and skip
// select (read from a dry run), then only testdata/subset.txt's unless
// -conformance.all, and only those matching -conformance.focus.
func (r *suiteRun) selected() (suite string, names map[string]string) {
	t := r.t
	dir := t.TempDir()
	cmd := exec.Command(filepath.Join(r.suite, "e2e_node.test"), "--ginkgo.dry-run", "--ginkgo.focus="+focus, "--ginkgo.skip="+skip,
		"--ginkgo.json-report="+filepath.Join(dir, "dry.json"))
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("listing the suite's specs: %v\n%s", err, out)
	}
	data, err := os.ReadFile(filepath.Join(dir, "dry.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dry []suiteReport
	if err := json.Unmarshal(data, &dry); err != nil || len(dry) != 1 {
		t.Fatalf("the dry run's report: %v (%d suites)", err, len(dry))
	}
	// A dry run reports the specs its focus and skip leave out as
	// skipped, and the others as passed.
	var all []specResult
	for _, s := range dry[0].SpecReports {
		if s.LeafNodeType == "It" && s.State != "skipped" {
			all = append(all, s)
		}
	}
	var subset map[string]string
	if !*allFlag {
		if subset, err = readList("testdata/subset.txt"); err != nil {
			t.Fatal(err)
		}
	}
	var narrow *regexp.Regexp
	if *focusFlag != "" {
		narrow = regexp.MustCompile(*focusFlag)
	}
	names = map[string]string{}
	for _, s := range all {
		n := s.name()
		if _, in := subset[n]; (subset != nil && !in) || (narrow != nil && !narrow.MatchString(n)) {
			continue
		}
		names[n] = ""
	}
	for n := range subset {
		if _, ok := names[n]; !ok && narrow == nil {
			t.Fatalf("testdata/subset.txt names a spec the suite does not select: %q", n)
		}
	}
	if len(names) == 0 {
		t.Fatal("no spec selected")
	}
	t.Logf("running %d of the suite's %d selected specs", len(names), len(all))
	return dry[0].SuiteDescription, names
}

// startAgentOnceServing starts the agent as soon as the suite's API
// server answers (the suite then waits two minutes for the node to be
// Ready), or returns if the suite ends first.
func (r *suiteRun) startAgentOnceServing(done chan error) {
	t := r.t
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			done <- err // for run to read
			return
		default:
		}
		req, _ := http.NewRequest(http.MethodGet, apiServer+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+r.token)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				r.agent.start(t, r.work, r.token)
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatal("the suite's API server did not answer within 10 minutes")
}

// ensureRootfs makes the mount point of the suite's view of the host
// root, and removes it again when it made it.
func ensureRootfs(t *testing.T) string {
	const rootfs = "/rootfs"
	if err := os.Mkdir(rootfs, 0o755); err == nil {
		t.Cleanup(func() { _ = os.Remove(rootfs) })
	} else if !os.IsExist(err) {
		t.Fatal(err)
	}
	return rootfs
}

// pathWithout is a PATH with the same commands as this process's, but
// for those named: upstream's launcher starts the kubelet as a systemd
// unit when systemd-run is found, and systemd is not running here.
func pathWithout(t *testing.T, names ...string) string {
	dir := t.TempDir()
	seen := map[string]bool{}
	for _, n := range names {
		seen[n] = true
	}
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if seen[e.Name()] {
				continue
			}
			seen[e.Name()] = true
			if err := os.Symlink(filepath.Join(d, e.Name()), filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

func tail(path string, lines int) string {
	b, _ := os.ReadFile(path)
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
