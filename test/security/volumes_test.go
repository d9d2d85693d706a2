//go:build integration

package security

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testbed"
	"github.com/nodelet/nodelet/internal/testutil"
)

// dataVolumes are the four volumes nodelet writes the API's data into,
// each with a file "key", mounted at /v/<name> with readOnly: false asked
// for explicitly.
func dataVolumes() ([]v1.Volume, []v1.VolumeMount) {
	name := &v1.ObjectFieldSelector{FieldPath: "metadata.name"}
	vols := []v1.Volume{
		{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "data"}}}},
		{Name: "sec", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "data"}}},
		{Name: "dapi", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{{Path: "key", FieldRef: name}}}}},
		{Name: "proj", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "data"}}},
			{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{{Path: "name", FieldRef: name}}}},
		}}}},
	}
	var mounts []v1.VolumeMount
	for _, v := range vols {
		mounts = append(mounts, v1.VolumeMount{Name: v.Name, MountPath: "/v/" + v.Name, ReadOnly: false})
	}
	return vols, mounts
}

// A container running as root cannot change the configMap, secret,
// downwardAPI and projected volumes the node writes (CVE-2017-1002102):
// rewriting a file, re-pointing ..data and creating a file all fail with
// EROFS, whatever readOnly says, and the pod's other container reads the
// real data. An update of the configMap still reaches both containers.
func TestAPIDataVolumesAreReadOnly(t *testing.T) {
	const ns = "sec-volumes"
	ctx := context.Background()
	namespace(t, ns)
	n := clusterNode(t, "sec-volumes-node")
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "data"}, Data: map[string]string{"key": "real"}}
	if _, err := cl.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sec := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "data"}, Data: map[string][]byte{"key": []byte("real")}}
	if _, err := cl.Client.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vols, mounts := dataVolumes()
	sleeper := func(name string) v1.Container {
		return v1.Container{Name: name, Image: testbed.BusyboxImage, Command: []string{"sleep", "3600"}, VolumeMounts: mounts,
			SecurityContext: &v1.SecurityContext{RunAsUser: new(int64(0))}}
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "victim"}, Spec: v1.PodSpec{NodeName: n.NodeName,
		AutomountServiceAccountToken: new(false), TerminationGracePeriodSeconds: new(int64(1)), Volumes: vols,
		Containers: []v1.Container{sleeper("attacker"), sleeper("reader")}}}
	if _, err := cl.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var attacker, reader string
	testbed.Eventually(t, podTimeout, func() (bool, string) {
		a, r := n.RunningPodContainer("victim", "attacker"), n.RunningPodContainer("victim", "reader")
		if a == nil || r == nil {
			return false, "victim's containers are not running"
		}
		attacker, reader = a.Id, r.Id
		return true, ""
	})
	for _, v := range vols {
		t.Run(v.Name, func(t *testing.T) {
			r := &row{scenario: "read-only " + v.Name, attack: "as root: rewrite a file, re-point or remove ..data, create a file"}
			record(t, r)
			dir := "/v/" + v.Name
			file := dir + "/key"
			if v.Name == "proj" {
				file = dir + "/name"
			}
			before, err := n.Exec(reader, "cat", file)
			if err != nil {
				t.Fatal(err)
			}
			var answers []string
			for _, attack := range [][]string{
				{"sh", "-c", "echo forged >" + file},
				// Re-point ..data as the writer does it: a new link renamed over.
				{"sh", "-c", "ln -s /etc " + dir + "/..data_tmp && mv " + dir + "/..data_tmp " + dir + "/..data"},
				{"rm", dir + "/..data"},
				{"touch", dir + "/planted"},
			} {
				out, err := n.Exec(attacker, attack...)
				if err == nil {
					t.Errorf("%q succeeded: %q", attack, out)
					continue
				}
				if !strings.Contains(err.Error(), "Read-only file system") {
					t.Errorf("%q failed with %v, want EROFS", attack, err)
				}
				answers = append(answers, "EROFS")
			}
			r.answer = strings.Join(answers, ", ")
			if after, err := n.Exec(reader, "cat", file); err != nil || after != before {
				t.Errorf("the other container reads %q (%v), was %q", after, err, before)
			}
			if out, err := n.Exec(reader, "readlink", dir+"/..data"); err != nil || !strings.HasPrefix(out, "..") {
				t.Errorf("..data points at %q (%v), want the writer's ..<timestamp>", out, err)
			}
			r.invariant = hostUntouched(t, n)
		})
	}
	// Updates still reach running containers through the read-only mounts.
	cm.Data["key"] = "updated"
	if _, err := cl.Client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{attacker, reader} {
		for _, f := range []string{"/v/cm/key", "/v/proj/key"} {
			testbed.Eventually(t, 2*podTimeout, func() (bool, string) {
				out, err := n.Exec(id, "cat", f)
				return err == nil && out == "updated", fmt.Sprintf("%s reads %q (%v)", f, out, err)
			})
		}
	}
}

// A container that planted links to a host directory in each of its
// volumes before it exited (where it could: its emptyDirs; the API-data
// volumes refuse it) does not have that directory emptied, nor anything
// of the host's removed, when the pod is deleted and torn down.
func TestTeardownWithPlantedLinks(t *testing.T) {
	const ns = "sec-teardown"
	ctx := context.Background()
	namespace(t, ns)
	n := clusterNode(t, "sec-teardown-node")
	hostDir := filepath.Join(t.TempDir(), "host")
	testutil.Must(t, os.MkdirAll(filepath.Join(hostDir, "sub"), 0o755))
	testutil.Must(t, os.WriteFile(filepath.Join(hostDir, "sub", "precious"), []byte("keep"), 0o644))
	if _, err := cl.Client.CoreV1().ConfigMaps(ns).Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Data: map[string]string{"key": "real"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Client.CoreV1().Secrets(ns).Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Data: map[string][]byte{"key": []byte("real")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vols, mounts := dataVolumes()
	vols = append(vols,
		v1.Volume{Name: "disk", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		v1.Volume{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}})
	mounts = append(mounts, v1.VolumeMount{Name: "disk", MountPath: "/v/disk"}, v1.VolumeMount{Name: "mem", MountPath: "/v/mem"})
	// The host directory as the container sees the host: the link is
	// followed (if ever) on the host, where it names hostDir.
	var script strings.Builder
	for _, v := range vols {
		d := "/v/" + v.Name
		fmt.Fprintf(&script, "ln -s %s %s/link && echo planted-%s; ln -sfn %s %s/..data && echo repointed-%s; mkdir -p %s/nest && ln -s %s %s/nest/deep; ",
			hostDir, d, v.Name, hostDir, d, v.Name, d, hostDir, d)
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "planter"}, Spec: v1.PodSpec{NodeName: n.NodeName,
		AutomountServiceAccountToken: new(false), TerminationGracePeriodSeconds: new(int64(1)), RestartPolicy: v1.RestartPolicyNever,
		Volumes: vols, Containers: []v1.Container{{Name: "main", Image: testbed.BusyboxImage, VolumeMounts: mounts,
			Command: []string{"sh", "-c", script.String() + "true"}, TerminationMessagePolicy: v1.TerminationMessageFallbackToLogsOnError}}}}
	created, err := cl.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := &row{scenario: "teardown-planted-links", attack: "links to a host dir in every volume, then delete the pod"}
	record(t, r)
	var planted string
	testbed.Eventually(t, podTimeout, func() (bool, string) {
		p, err := cl.Client.CoreV1().Pods(ns).Get(ctx, "planter", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		planted = strings.Join(strings.Fields(podLogOf(t, n, ns, "planter", p.UID)), " ")
		return p.Status.Phase == v1.PodSucceeded, fmt.Sprintf("phase %s", p.Status.Phase)
	})
	for _, v := range []string{"disk", "mem"} {
		if !strings.Contains(planted, "planted-"+v) {
			t.Errorf("the link was not planted in the %s emptyDir (the attack did not run): %q", v, planted)
		}
	}
	for _, v := range []string{"cm", "sec", "dapi", "proj"} {
		if strings.Contains(planted, "planted-"+v) || strings.Contains(planted, "repointed-"+v) {
			t.Errorf("a link was planted in the read-only %s volume: %q", v, planted)
		}
	}
	testutil.Must(t, cl.Client.CoreV1().Pods(ns).Delete(ctx, "planter", metav1.DeleteOptions{}))
	podDir := filepath.Join(n.RootDir, "pods", string(created.UID))
	testbed.Eventually(t, 2*podTimeout, func() (bool, string) {
		_, err := os.Stat(podDir)
		return os.IsNotExist(err), fmt.Sprintf("the pod's directory %s is still there (%v)", podDir, err)
	})
	r.answer = "links planted in emptyDirs only; pod dir removed"
	if got, err := os.ReadFile(filepath.Join(hostDir, "sub", "precious")); err != nil || string(got) != "keep" {
		t.Errorf("the host directory behind the links was changed by the teardown: %q, %v", got, err)
	}
	r.invariant = hostUntouched(t, n)
}
