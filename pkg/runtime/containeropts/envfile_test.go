package containeropts

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testutil"
	"github.com/nodelet/nodelet/pkg/volumes/volume"
)

// The env file syntax, as upstream's parser reads it.
func TestEnvFileValue(t *testing.T) {
	for _, tc := range []struct {
		name, file, key, want, err string
	}{
		{name: "upstream's spec", file: "CONFIG_1='value1'\nCONFIG_2='value2'\n", key: "CONFIG_2", want: "value2"},
		{name: "literal", file: "A='$HOME \\n \"x\"'", key: "A", want: `$HOME \n "x"`},
		{name: "comments, blanks and indentation", file: "# c\n\n  \t\n\tA='1' # trailing\n", key: "A", want: "1"},
		{name: "multi-line", file: "A='one\ntwo\n'\nB='3'", key: "A", want: "one\ntwo\n"},
		{name: "a key across a multi-line value", file: "A='B=no\n'\nB='yes'", key: "B", want: "yes"},
		{name: "first assignment wins", file: "A='1'\nA='2'", key: "A", want: "1"},
		{name: "missing", file: "A='1'", key: "B", want: ""},
		{name: "space after =", file: "A= '1'", key: "A", want: ""},
		{name: "space after = elsewhere", file: "B= '1'\nA='2'", key: "A", want: "2"},
		{name: "space before =", file: "A ='1'", key: "A", err: "whitespace before '='"},
		{name: "no =", file: "A\n", key: "A", err: "no '='"},
		{name: "no name", file: "='1'", key: "A", err: "no variable name"},
		{name: "unquoted", file: "A=1", key: "A", err: "single quotes"},
		{name: "double quoted", file: `A="1"`, key: "A", err: "single quotes"},
		{name: "unclosed", file: "A='1\nB=2", key: "C", err: "unclosed"},
		{name: "content after the quote", file: "A='1'x", key: "A", err: "after the closing quote"},
		{name: "a bad line before the key", file: "X=1\nA='1'", key: "A", err: "line 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := envFileValue(strings.NewReader(tc.file), tc.key)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %q, %v; want an error naming %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// fileKeyRef reads the key from the file in the pod's volume, as
// upstream's "MirrorPod with EnvFiles … should be able to consume
// variables from a file"; a missing optional key is left out, a missing
// required one stops the container with an error, and the file is the
// pod's own: a link out of the volume, or a FIFO that would block the
// reader, is refused.
func TestFileKeyRefEnv(t *testing.T) {
	vm := volume.NewManager(volume.Options{RootDir: t.TempDir()})
	o := New(Options{RootDir: t.TempDir(), NodeName: "n1", Volumes: vm})
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}}
	pod.Spec.Volumes = []v1.Volume{{Name: "config", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	ref := func(name, path, key string, optional bool) v1.EnvVar {
		return v1.EnvVar{Name: name, ValueFrom: &v1.EnvVarSource{FileKeyRef: &v1.FileKeySelector{VolumeName: "config", Path: path, Key: key, Optional: &optional}}}
	}
	run := func(env ...v1.EnvVar) (map[string]string, error) {
		c := v1.Container{Name: "use-envfile", Env: env}
		pod.Spec.Containers = []v1.Container{c}
		opts, err := o.RunContainerOptions(context.Background(), pod, &c, nil)
		if err != nil {
			return nil, err
		}
		got := map[string]string{}
		for _, kv := range opts.Envs {
			got[kv.Key] = string(kv.Value)
		}
		return got, nil
	}
	// Set the volume up (as the pod's sync does before any container
	// starts), then write the file as the init container would.
	testutil.Must(t, vm.WaitForAttachAndMount(context.Background(), pod))
	dir, _ := vm.HostPath(pod.UID, "config")
	testutil.Must(t, os.WriteFile(filepath.Join(dir, "config.env"), []byte("CONFIG_1='value1'\nCONFIG_2='value2'\n"), 0o644))

	got, err := run(ref("CONFIG_1", "config.env", "CONFIG_1", false), ref("CONFIG_2", "config.env", "CONFIG_2", false), ref("OPT", "config.env", "NONE", true))
	if err != nil {
		t.Fatal(err)
	}
	if got["CONFIG_1"] != "value1" || got["CONFIG_2"] != "value2" {
		t.Errorf("env %v", got)
	}
	if _, ok := got["OPT"]; ok {
		t.Errorf("a missing optional key is set: %v", got)
	}
	if _, err := run(ref("X", "config.env", "NONE", false)); err == nil || !strings.Contains(err.Error(), `key "NONE" not found`) {
		t.Errorf("a missing required key: %v", err)
	}
	if _, err := run(ref("X", "absent.env", "A", false)); err == nil {
		t.Error("a missing file was read")
	}

	// Attacks: the pod's container planted these.
	secret := filepath.Join(t.TempDir(), "host.env")
	testutil.Must(t, os.WriteFile(secret, []byte("A='host secret'\n"), 0o600))
	testutil.Must(t, os.Symlink(secret, filepath.Join(dir, "link.env")))
	testutil.Must(t, os.Symlink("../../../../../../../../.."+secret, filepath.Join(dir, "relative.env")))
	testutil.Must(t, syscall.Mkfifo(filepath.Join(dir, "fifo.env"), 0o644))
	for path, want := range map[string]string{
		"link.env": "outside the volume", "relative.env": "outside the volume",
		"../../../../../../../../.." + secret: "outside the volume", secret: "not a relative path",
		"fifo.env": "not a regular file",
	} {
		if got, err := run(ref("A", path, "A", false)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: read %v, %v; want an error saying %q", path, got, err, want)
		}
	}
}
