package standalone

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// Every read names what the pod asked for and wraps ErrNoAPIServer, so
// the pod's event says why it cannot run here.
func TestEveryReadNamesItsObjectAndFails(t *testing.T) {
	ctx := context.Background()
	var a API
	reads := map[string]func() error{
		`secret "s"`:                  func() error { _, err := a.GetSecret(ctx, "ns", "s"); return err },
		`configmap "c"`:               func() error { _, err := a.GetConfigMap(ctx, "ns", "c"); return err },
		"service account token":       func() error { _, err := a.CreateToken(ctx, "ns", "sa", nil); return err },
		`persistentvolumeclaim "pvc"`: func() error { _, err := a.GetPersistentVolumeClaim(ctx, "ns", "pvc"); return err },
		`persistentvolume "pv"`:       func() error { _, err := a.GetPersistentVolume(ctx, "pv"); return err },
	}
	for want, read := range reads {
		err := read()
		if !errors.Is(err, ErrNoAPIServer) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
	if !IsAPI(a) || IsAPI(struct{}{}) {
		t.Error("IsAPI does not tell API apart")
	}
}
