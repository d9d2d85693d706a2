//go:build integration

package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/cmd/nodelet/inspect"
	"github.com/nodelet/nodelet/internal/testbed"
	"github.com/nodelet/nodelet/pkg/observe/instrument"
	"github.com/nodelet/nodelet/pkg/observe/timeline"
)

// A pod with an init container, two volumes and a readiness probe shows
// its life in `nodelet timeline` (through the API server to the kubelet
// API): first seen, the waits and syncs until it ran, the init and main
// containers' events in order, the probe; the waits and syncs from seen to
// running add up to its start latency, which agrees with the pod start
// metric within 5%.
func TestTimelineOfAPod(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	n := startNode(t, "node-timeline", cd, "")
	waitNodeReady(t, n.NodeName, 10*time.Second)
	pod := busyboxPod("traced", n.NodeName)
	pod.Spec.InitContainers = []v1.Container{{Name: "init", Image: testbed.BusyboxImage, Command: []string{"sh", "-c", "sleep 1"},
		ImagePullPolicy: v1.PullIfNotPresent}}
	pod.Spec.Volumes = []v1.Volume{
		{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "info", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
			{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}},
	}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}, {Name: "info", MountPath: "/info"}}
	pod.Spec.Containers[0].ReadinessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"cat", "/info/name"}}},
		PeriodSeconds: 1}
	if _, err := cl.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, 60*time.Second, ns, "traced", func(p *v1.Pod) (bool, string) {
		return condition(p, v1.PodReady) == v1.ConditionTrue, "not ready"
	})

	var out bytes.Buffer
	args := []string{"--kubeconfig", cl.AdminKubeconfig, "-o", "json", ns + "/traced"}
	if err := inspect.TimelineCommand(ctx, args, &out); err != nil {
		t.Fatal(err)
	}
	var tl timeline.Timeline
	if err := json.Unmarshal(out.Bytes(), &tl); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	var order []string
	var tiled time.Duration
	running := false
	for _, s := range tl.Steps {
		order = append(order, string(s.Kind)+":"+s.Name)
		if !running && (s.Kind == instrument.KindWait || s.Kind == instrument.KindSync) {
			tiled += s.Duration()
		}
		running = running || s.Kind == instrument.KindRunning
	}
	// The sandbox, with the volumes set up beside it, then the init
	// container (its image, created and started), then the main one,
	// then the pod runs; its readiness probe passes.
	img := testbed.BusyboxImage
	want := []string{"source:seen", "merge:ADD", "sync:sync (create)", "volume:scratch", "volume:info",
		"image:" + img, "container:init", "event:Started", "image:" + img, "container:main", "running:running"}
	if !inOrder(order, want) || !inOrder(order, []string{"sync:sync (create)", "sandbox:attempt 0", "image:" + img}) ||
		!slices.Contains(order, "probe:Readiness main") || !slices.Contains(order, "status:written to the API") {
		t.Fatalf("steps %v\nwant in order %v, the sandbox before the first image, the probe and a status write", order, want)
	}
	checkVolumesBesideTheSandbox(t, tl)
	for _, s := range tl.Steps {
		if s.Kind == instrument.KindImage && !strings.Contains(s.Detail, " bytes") {
			t.Fatalf("image step without its size: %+v", s)
		}
	}
	started, ok := timeline.StartLatency(tl)
	if !ok || tiled != started {
		t.Fatalf("start latency %v (%v); waits and syncs before running add up to %v", started, ok, tiled)
	}
	metric := podStartSum(t, ctx, n.NodeName)
	if math.Abs(metric-started.Seconds()) > 0.05*started.Seconds() {
		t.Fatalf("pod start metric %.3fs, timeline %v", metric, started)
	}

	out.Reset()
	if err := inspect.TimelineCommand(ctx, []string{"--kubeconfig", cl.AdminKubeconfig, ns + "/traced"}, &out); err != nil {
		t.Fatal(err)
	}
	if text := out.String(); !strings.Contains(text, "started in ") || !strings.Contains(text, "WATERFALL") || !strings.Contains(text, "#") {
		t.Fatalf("text view:\n%s", text)
	}
	t.Logf("nodelet timeline %s/traced:\n%s", ns, out.String())
}

// inOrder says whether want appears in got as a subsequence.
func inOrder(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// podStartSum is the node's pod start histogram's sum, in seconds: on a
// node that started one pod, that pod's start latency.
func podStartSum(t *testing.T, ctx context.Context, node string) float64 {
	t.Helper()
	raw, err := cl.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node, "proxy", "metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	f, err := parser.TextToMetricFamilies(strings.NewReader(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	fam := f["kubelet_pod_start_duration_seconds"]
	var h *dto.Histogram
	if fam != nil && len(fam.Metric) > 0 {
		h = fam.Metric[0].GetHistogram()
	}
	if h.GetSampleCount() != 1 {
		t.Fatalf("pod start histogram has %d samples, want this pod's alone", h.GetSampleCount())
	}
	return h.GetSampleSum()
}

// checkVolumesBesideTheSandbox: the volumes' set-up began before the
// sandbox was created, and the first container waited for it.
func checkVolumesBesideTheSandbox(t *testing.T, tl timeline.Timeline) {
	t.Helper()
	var sandbox, first *timeline.Step
	var volumes []timeline.Step
	for i, st := range tl.Steps {
		switch {
		case st.Kind == instrument.KindSandbox && sandbox == nil:
			sandbox = &tl.Steps[i]
		case st.Kind == instrument.KindVolume:
			volumes = append(volumes, st)
		case st.Kind == instrument.KindImage && first == nil:
			first = &tl.Steps[i]
		}
	}
	if sandbox == nil || first == nil || len(volumes) != 2 {
		t.Fatalf("sandbox %v, first image %v, volumes %d", sandbox, first, len(volumes))
	}
	for _, v := range volumes {
		if !v.Start.Before(sandbox.End) {
			t.Errorf("volume %s began at %v, after the sandbox was created (%v): not beside it", v.Name, v.Start, sandbox.End)
		}
		if first.Start.Before(v.End) {
			t.Errorf("the first container's image step began at %v, before volume %s was set up (%v)", first.Start, v.Name, v.End)
		}
	}
}
