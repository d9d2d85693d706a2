package pleg

import (
	"errors"
	"testing"
	"time"
)

// Before the first complete relist the cache cannot say a pod has
// nothing running (it may not be read yet); after it, it can.
func TestUnknownPodBeforeTheFirstRelist(t *testing.T) {
	c := NewCache()
	if s, err := c.Get("p"); !errors.Is(err, ErrNotRelisted) {
		t.Fatalf("before the first relist: %v %v", s, err)
	}
	c.MarkRelisted(time.Unix(1000, 0))
	if _, err := c.Get("p"); err != nil {
		t.Fatalf("after the first relist: %v", err)
	}
}
