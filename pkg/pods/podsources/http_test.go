package podsources

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
)

// fakeServer serves whatever status and body the test sets, or hangs.
type fakeServer struct {
	mu      sync.Mutex
	status  int
	body    string
	hang    bool
	headers []http.Header
}

func (f *fakeServer) set(status int, body string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status, f.body, f.hang = status, body, false
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	status, body, hang := f.status, f.body, f.hang
	f.headers = append(f.headers, r.Header.Clone())
	f.mu.Unlock()
	if hang {
		<-r.Context().Done()
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body)) // a failed write is the client's to see
}

type httpFixture struct {
	t      *testing.T
	src    *HTTPSource
	server *fakeServer
	rec    *setRecorder
	events *record.FakeRecorder
}

func newHTTPFixture(t *testing.T, status int, body string) *httpFixture {
	fs := &fakeServer{status: status, body: body}
	srv := httptest.NewServer(fs)
	t.Cleanup(srv.Close)
	f := &httpFixture{t: t, server: fs, rec: &setRecorder{sets: make(chan []*v1.Pod, 100)}, events: record.NewFakeRecorder(100)}
	header := http.Header{"Authorization": {"Bearer secret"}}
	f.src = NewHTTPSource(srv.URL+"/pods", header, Static{NodeName: "node1"}, 20*time.Second, f.rec, f.events, testingclock.NewFakeClock(time.Unix(0, 0)))
	return f
}

// poll polls once and returns the set delivered, or nil and false.
func (f *httpFixture) poll() (string, bool) {
	f.src.poll(context.Background())
	select {
	case pods := <-f.rec.sets:
		return names(pods), true
	default:
		return "", false
	}
}

func (f *httpFixture) eventCount() int { return len(f.events.Events) }

const podList = `{"apiVersion":"v1","kind":"PodList","items":[
{"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"img:1"}]}},
{"metadata":{"name":"b"},"spec":{"containers":[{"name":"c","image":"img:1"}]}}]}`

func TestHTTPSourceOnePodAndHeaders(t *testing.T) {
	f := newHTTPFixture(t, 200, manifest("web", "img:1"))
	if got, ok := f.poll(); !ok || got != "web-node1@img:1" {
		t.Fatalf("got %q %v", got, ok)
	}
	if h := f.server.headers[0].Get("Authorization"); h != "Bearer secret" {
		t.Fatalf("header %q", h)
	}
}

func TestHTTPSourceList(t *testing.T) {
	f := newHTTPFixture(t, 200, podList)
	got, ok := f.poll()
	if !ok || got != "a-node1@img:1,b-node1@img:1" {
		t.Fatalf("got %q %v", got, ok)
	}
}

func TestHTTPSourceUnchangedBodySendsNothing(t *testing.T) {
	f := newHTTPFixture(t, 200, manifest("web", "img:1"))
	f.poll()
	if _, ok := f.poll(); ok {
		t.Fatal("an unchanged body was delivered again")
	}
	f.server.set(200, manifest("web", "img:2"))
	if got, ok := f.poll(); !ok || got != "web-node1@img:2" {
		t.Fatalf("changed body: %q %v", got, ok)
	}
}

func TestHTTPSourceKeepsTheLastGoodSet(t *testing.T) {
	for name, breakIt := range map[string]func(*fakeServer){
		"server error": func(s *fakeServer) { s.set(500, "oops") },
		"garbage":      func(s *fakeServer) { s.set(200, "{{{ not yaml") },
		"wrong kind":   func(s *fakeServer) { s.set(200, "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n") },
		"invalid pod in a list": func(s *fakeServer) {
			s.set(200, strings.Replace(podList, `"name":"b"`, `"name":"B_AD"`, 1))
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newHTTPFixture(t, 200, manifest("web", "img:1"))
			f.poll()
			breakIt(f.server)
			if got, ok := f.poll(); ok {
				t.Fatalf("a bad response replaced the set with %q", got)
			}
			if f.eventCount() != 1 {
				t.Fatalf("%d events, want 1", f.eventCount())
			}
			f.poll()
			if f.eventCount() != 1 {
				t.Fatal("the same failure was reported twice")
			}
			f.server.set(200, manifest("web", "img:2"))
			if got, ok := f.poll(); !ok || got != "web-node1@img:2" {
				t.Fatalf("after recovery: %q %v", got, ok)
			}
		})
	}
}

func TestHTTPSourceTimeout(t *testing.T) {
	f := newHTTPFixture(t, 200, manifest("web", "img:1"))
	f.poll()
	f.server.mu.Lock()
	f.server.hang = true
	f.server.mu.Unlock()
	f.src.client.Timeout = 50 * time.Millisecond
	if got, ok := f.poll(); ok {
		t.Fatalf("a hanging server replaced the set with %q", got)
	}
	if e := <-f.events.Events; !strings.Contains(e, "Timeout") && !strings.Contains(e, "deadline") {
		t.Fatalf("event %q", e)
	}
}

func TestHTTPSourceEmptyBodyIsAnEmptySet(t *testing.T) {
	f := newHTTPFixture(t, 200, "")
	if got, ok := f.poll(); !ok || got != "" {
		t.Fatalf("empty body: %q %v", got, ok)
	}
}

func TestHTTPSourceUIDsDependOnTheURLNotTheNode(t *testing.T) {
	f := newHTTPFixture(t, 200, manifest("web", "img:1"))
	f.src.poll(context.Background())
	a := (<-f.rec.sets)[0]
	g := newHTTPFixture(t, 200, manifest("web", "img:1"))
	g.src.url = f.src.url
	g.src.static.NodeName = "node2"
	g.src.poll(context.Background())
	b := (<-g.rec.sets)[0]
	if a.UID != b.UID {
		t.Fatal("same URL and content, different UIDs")
	}
	if len(a.Spec.Tolerations) != 0 {
		t.Fatal("HTTP static pods get no tolerations (only file pods do)")
	}
}

// FuzzHTTPSource serves arbitrary bodies and statuses to the HTTP source:
// garbage is an error (and an event), never a panic, and a set is
// delivered only from a body that decodes.
func FuzzHTTPSource(f *testing.F) {
	f.Add(200, podList)
	f.Add(200, "")
	f.Add(200, "{{{")
	f.Add(500, podList)
	f.Add(200, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"i","ports":[{"containerPort":-1}]}]}}`)
	f.Fuzz(func(t *testing.T, status int, body string) {
		if status < 200 || status > 599 {
			return // not a final HTTP status: the client would see another
		}
		fx := newHTTPFixture(t, status, body)
		_, delivered := fx.poll()
		if delivered && status != http.StatusOK {
			t.Fatalf("HTTP %d delivered pods", status)
		}
		if !delivered && fx.eventCount() == 0 {
			t.Fatalf("HTTP %d with %q: neither pods nor an event", status, body)
		}
	})
}
