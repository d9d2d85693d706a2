package allocation

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func pod(uid, cpu string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c",
		Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)}}}}}}
}

// What was granted and applied survives a restart; a pod's spec is run
// with what it was granted; equivalent quantities are equal; pods not kept
// are forgotten; a corrupt file is an error, not an empty store.
func TestStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Allocate(pod("a", "1")); err != nil {
		t.Fatal(err)
	}
	if err := s.SetActuated("a", "c", pod("a", "1000m").Spec.Containers[0].Resources); err != nil {
		t.Fatal(err)
	}
	if err := s.Allocate(pod("b", "1")); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := s.Actuated("a", "c"); !ok || got.Requests.Cpu().MilliValue() != 1000 {
		t.Fatalf("actuated after reopening: %v %v", got, ok)
	}
	if run, changed := s.WithAllocation(pod("a", "1000m")); changed || run.Spec.Containers[0].Resources.Requests.Cpu().MilliValue() != 1000 {
		t.Fatalf("1000m is what was granted: changed %v", changed)
	}
	run, changed := s.WithAllocation(pod("a", "2"))
	if !changed || run.Spec.Containers[0].Resources.Requests.Cpu().String() != "1" {
		t.Fatalf("a resize not granted runs with the grant: changed %v, %v", changed, run.Spec.Containers[0].Resources)
	}
	if err := s.Retain(func(uid types.UID) bool { return uid == "a" }); err != nil {
		t.Fatal(err)
	}
	if s, _ = Open(path); s.Known("b") || !s.Known("a") {
		t.Fatal("b was kept, or a forgotten")
	}
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("corrupt file: %v", err)
	}
}

// Staged grants reach the file at Commit; changes made at once by many
// goroutines each return only once the file holds them, and share writes
// (a reader opening the file after any of them returns sees it).
func TestStageAndGroupCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		s.Stage(pod(fmt.Sprint("staged", i), "1"))
	}
	if again, err := Open(path); err != nil || again.Known("staged0") {
		t.Fatalf("a staged grant is on disk before Commit (err %v)", err)
	}
	if err := s.Commit(); err != nil {
		t.Fatal(err)
	}
	if again, err := Open(path); err != nil || !again.Known("staged0") || !again.Known("staged2") {
		t.Fatalf("staged grants not on disk after Commit (err %v)", err)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			uid := types.UID(fmt.Sprint("p", i))
			if err := s.SetActuated(uid, "c", pod(string(uid), "1").Spec.Containers[0].Resources); err != nil {
				errs <- err
				return
			}
			again, err := Open(path)
			if err == nil && !again.Known(uid) {
				err = fmt.Errorf("%s returned before the file held it", uid)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if s.written != s.changed {
		t.Fatalf("written %d of %d changes", s.written, s.changed)
	}
}

// A container's first actuation of what it was granted is not written on
// its own: the file without it says the same. The next write carries it,
// and an actuation that differs from the grant is written at once.
func TestFirstActuationOfTheGrantRidesTheNextWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Allocate(pod("a", "1")); err != nil {
		t.Fatal(err)
	}
	if err := s.SetActuated("a", "c", pod("a", "1000m").Spec.Containers[0].Resources); err != nil {
		t.Fatal(err)
	}
	if got, ok := s.Actuated("a", "c"); !ok || got.Requests.Cpu().MilliValue() != 1000 {
		t.Fatalf("actuated in memory: %v %v", got, ok)
	}
	if again, err := Open(path); err != nil || !again.Known("a") {
		t.Fatalf("the grant is not on disk: %v", err)
	} else if _, ok := again.Actuated("a", "c"); ok {
		t.Fatal("the first actuation of the grant was written on its own")
	}

	// Any later write carries it.
	if err := s.Allocate(pod("b", "1")); err != nil {
		t.Fatal(err)
	}
	again, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := again.Actuated("a", "c"); !ok || got.Requests.Cpu().MilliValue() != 1000 {
		t.Fatalf("the next write did not carry the actuation: %v %v", got, ok)
	}

	// An actuation other than the grant (b runs with 2 CPUs where it was
	// granted 1) is on disk when SetActuated returns.
	if err := s.SetActuated("b", "c", pod("b", "2").Spec.Containers[0].Resources); err != nil {
		t.Fatal(err)
	}
	if again, err := Open(path); err != nil {
		t.Fatal(err)
	} else if got, ok := again.Actuated("b", "c"); !ok || got.Requests.Cpu().MilliValue() != 2000 {
		t.Fatalf("an actuation other than the grant is not on disk: %v %v", got, ok)
	}
}

// Every pod's sync commits: with nothing to write, Commit returns at
// once, not after a write in flight.
func TestCommitWithNothingToWriteDoesNotWait(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Allocate(pod("a", "1")); err != nil {
		t.Fatal(err)
	}
	s.writing.Lock() // another write in flight
	defer s.writing.Unlock()
	done := make(chan error, 1)
	go func() { done <- s.Commit() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Commit with nothing to write waited for another write")
	}
}

// The file is written as json.Marshal would write the whole store, after
// every kind of change, while a pod not touched since the last write is
// not encoded again: its part of the file is reused (a burst's commits
// would otherwise each encode every pod).
func TestOnlyTouchedPodsAreEncodedAgain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	same := func(step string) {
		t.Helper()
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		want, err := json.Marshal(s.pods)
		s.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("after %s the file holds\n%s\nwant\n%s", step, got, want)
		}
	}
	// Quoted in JSON with escapes (<, >, & as json.Marshal writes them).
	for _, uid := range []string{"b", "a", "c<&>", "d\"e"} {
		if err := s.Allocate(pod(uid, "1")); err != nil {
			t.Fatal(err)
		}
		same("allocating " + uid)
	}
	if err := s.SetActuated("a", "c", pod("a", "2").Spec.Containers[0].Resources); err != nil {
		t.Fatal(err)
	}
	same("a resize applied")

	// Mark a's and b's encoded parts: a write that reuses them carries
	// the marks.
	s.mu.Lock()
	s.encoded["a"] = []byte(`{"c":{"allocated":{},"actuated":{"limits":{"cpu":"7"}}}}`)
	s.encoded["b"] = []byte(`{"c":{"allocated":{"limits":{"cpu":"9"}}}}`)
	s.mu.Unlock()
	if err := s.Allocate(pod("e", "1")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); !strings.Contains(string(got), `"cpu":"7"`) || !strings.Contains(string(got), `"cpu":"9"`) {
		t.Fatalf("allocating e encoded a and b again: %s", got)
	}
	// Touched, a is encoded again; b, untouched, still carries its mark.
	if err := s.Allocate(pod("a", "3")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); strings.Contains(string(got), `"cpu":"7"`) || !strings.Contains(string(got), `"cpu":"9"`) {
		t.Fatalf("after a's change: %s", got)
	}
	s.mu.Lock()
	delete(s.encoded, "b")
	s.mu.Unlock()
	if err := s.Retain(func(uid types.UID) bool { return uid != "c<&>" }); err != nil {
		t.Fatal(err)
	}
	same("forgetting a pod")
	if reopened, err := Open(path); err != nil || !reopened.Known("d\"e") || reopened.Known("c<&>") {
		t.Fatalf("reopened: %v", err)
	}
}
