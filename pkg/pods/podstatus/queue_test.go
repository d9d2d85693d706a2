package podstatus

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
)

func newTestQueue() (*writeQueue, *testingclock.FakeClock) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	return newWriteQueue(clk), clk
}

// drain takes (and ends) every pod waiting, and lists them with their class.
func drain(q *writeQueue) string {
	var out []string
	for {
		if q.Len() == 0 {
			return fmt.Sprint(out)
		}
		uid, urgent, _ := q.Get()
		q.Done(uid)
		out = append(out, fmt.Sprintf("%s:%v", uid, urgent))
	}
}

func TestWriteQueueUrgentFirstEachInOrder(t *testing.T) {
	q, _ := newTestQueue()
	q.Add("n1", false)
	q.Add("n2", false)
	q.Add("u1", true)
	q.Add("n3", false)
	q.Add("u2", true)
	q.Add("n1", false) // waiting already: keeps its place
	q.Add("u1", false) // an urgent pod stays urgent
	if got, want := drain(q), "[u1:true u2:true n1:false n2:false n3:false]"; got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
}

// A waiting pod that becomes urgent moves to the urgent list's end, once.
func TestWriteQueueMovesAPodThatBecomesUrgent(t *testing.T) {
	q, _ := newTestQueue()
	q.Add("a", false)
	q.Add("b", false)
	q.Add("u", true)
	q.Add("a", true)
	q.Add("a", true)
	if got, want := drain(q), "[u:true a:true b:false]"; got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
	// Moved, it goes before pods made urgent after it.
	q.Add("c", false)
	q.Add("d", false)
	q.Add("c", true)
	q.Add("e", true)
	if got, want := drain(q), "[c:true e:true d:false]"; got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
}

// A pod moved to urgent leaves a stale entry in normal, which is neither
// counted nor handed out, also when the pod waits in normal again.
func TestWriteQueueSkipsTheEntryAMovedPodLeftBehind(t *testing.T) {
	q, _ := newTestQueue()
	q.Add("a", false)
	q.Add("b", false)
	q.Add("a", true)
	if n := q.Len(); n != 2 {
		t.Fatalf("%d waiting, want 2", n)
	}
	if uid, urgent, _ := q.Get(); uid != "a" || !urgent {
		t.Fatalf("got %s (urgent %v), want the moved a", uid, urgent)
	}
	q.Done("a")
	// a waits in normal again, behind its stale entry and b; then moves
	// again, and again comes back.
	q.Add("a", false)
	q.Add("a", true)
	if uid, _, _ := q.Get(); uid != "a" {
		t.Fatalf("got %s, want a moved again", uid)
	}
	q.Done("a")
	q.Add("c", false)
	q.Add("a", false)
	if urgent, normal := q.classes.waiting(); len(urgent) != 0 || fmt.Sprint(normal) != "[b c a]" {
		t.Fatalf("waiting %v %v, want [] [b c a]", urgent, normal)
	}
	if n := q.Len(); n != 3 {
		t.Fatalf("%d waiting, want 3", n)
	}
	if got, want := drain(q), "[b:false c:false a:false]"; got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
	if c := q.classes; len(c.normal) != 0 || len(c.inNormal) != 0 {
		t.Fatalf("left behind: normal %v, inNormal %v", c.normal, c.inNormal)
	}
}

// A pod added while a writer has it is not handed to a second writer; it
// comes back after Done, in the strongest class it was added with.
func TestWriteQueueNeverHandsAPodToTwoWriters(t *testing.T) {
	q, _ := newTestQueue()
	q.Add("a", false)
	uid, _, _ := q.Get()
	if uid != "a" {
		t.Fatalf("got %s", uid)
	}
	q.Add("a", false)
	q.Add("a", true)
	q.Add("b", false)
	if got := drain(q); got != "[b:false]" {
		t.Fatalf("while a is held: %s", got)
	}
	q.Done("a")
	if got := drain(q); got != "[a:true]" {
		t.Fatalf("after Done: %s", got)
	}
}

func TestWriteQueueAddAfter(t *testing.T) {
	q, clk := newTestQueue()
	q.AddAfter("a", true, 500*time.Millisecond)
	// b, due sooner, proves the queue has taken a in: it takes the
	// delayed pods in the order given.
	q.AddAfter("b", false, 100*time.Millisecond)
	clk.Step(100 * time.Millisecond)
	if uid, _, _ := q.Get(); uid != "b" {
		t.Fatalf("got %s, want b", uid)
	}
	q.Done("b")
	if got := drain(q); got != "[]" {
		t.Fatalf("before the delay: %s", got)
	}
	clk.Step(400 * time.Millisecond)
	uid, urgent, quit := q.Get()
	if uid != "a" || !urgent || quit {
		t.Fatalf("got %s %v %v", uid, urgent, quit)
	}
}

func TestWriteQueueShutDownWakesWriters(t *testing.T) {
	q, _ := newTestQueue()
	quit := make(chan bool)
	go func() { _, _, q := q.Get(); quit <- q }()
	q.ShutDown()
	if !<-quit {
		t.Fatal("Get after ShutDown did not say quit")
	}
	q.Add("a", true)
	if _, _, quit := q.Get(); !quit {
		t.Fatal("a shut-down queue handed a pod out")
	}
}

// TestWriteQueueConcurrent: writers and adders at once (with -race); no
// pod is ever held by two writers, and every pod added is written after
// its last addition.
func TestWriteQueueConcurrent(t *testing.T) {
	q, _ := newTestQueue()
	var mu sync.Mutex
	held := map[types.UID]bool{}
	addedSinceWrite := map[types.UID]bool{}
	var writers sync.WaitGroup
	for w := 0; w < 4; w++ {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for {
				uid, _, quit := q.Get()
				if quit {
					return
				}
				mu.Lock()
				if held[uid] {
					t.Errorf("pod %s held by two writers", uid)
				}
				held[uid] = true
				delete(addedSinceWrite, uid)
				mu.Unlock()
				mu.Lock()
				held[uid] = false
				mu.Unlock()
				q.Done(uid)
			}
		}()
	}
	var adders sync.WaitGroup
	for a := 0; a < 4; a++ {
		adders.Add(1)
		go func() {
			defer adders.Done()
			for i := 0; i < 2000; i++ {
				uid := types.UID(fmt.Sprint(i % 17))
				mu.Lock()
				addedSinceWrite[uid] = true
				mu.Unlock()
				q.Add(uid, i%3 == 0)
			}
		}()
	}
	adders.Wait()
	// A shut-down queue still hands out every pod waiting, and those
	// added while held: once the writers quit, all is written.
	q.ShutDown()
	writers.Wait()
	mu.Lock()
	if len(addedSinceWrite) != 0 {
		t.Errorf("pods added and never written after: %v", addedSinceWrite)
	}
	mu.Unlock()
}
