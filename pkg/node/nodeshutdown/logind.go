package nodeshutdown

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
)

// D-Bus names of logind and systemd.
const (
	logindService   = "org.freedesktop.login1"
	logindPath      = "/org/freedesktop/login1"
	logindInterface = "org.freedesktop.login1.Manager"
	systemdService  = "org.freedesktop.systemd1"
	systemdPath     = "/org/freedesktop/systemd1"
)

// The lock's owner and reason, and the drop-in file, as the kubelet's:
// systemd-inhibit --list shows the node agent the same way, and a node
// moved between the kubelet and nodelet keeps one drop-in.
const (
	inhibitWho   = "kubelet"
	inhibitWhy   = "Kubelet needs time to handle node shutdown"
	dropInName   = "99-kubelet.conf"
	logindConfig = "/etc/systemd/logind.conf.d"
)

// SystemLogind is systemd-logind on the system bus.
type SystemLogind struct {
	// ConfDir is where the InhibitDelayMaxSec drop-in goes (default
	// /etc/systemd/logind.conf.d).
	ConfDir string
}

// Connect opens a private connection to the system bus and subscribes to
// PrepareForShutdown.
func (l SystemLogind) Connect(ctx context.Context) (Session, error) {
	conn, err := dbus.ConnectSystemBus(dbus.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	if err := conn.AddMatchSignal(dbus.WithMatchInterface(logindInterface), dbus.WithMatchMember("PrepareForShutdown"),
		dbus.WithMatchObjectPath(logindPath)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("subscribing to PrepareForShutdown: %w", err)
	}
	dir := l.ConfDir
	if dir == "" {
		dir = logindConfig
	}
	s := &logindSession{conn: conn, confDir: dir, signals: make(chan *dbus.Signal, 4), shutdowns: make(chan bool, 4)}
	conn.Signal(s.signals)
	go s.forward()
	return s, nil
}

type logindSession struct {
	conn      *dbus.Conn
	confDir   string
	signals   chan *dbus.Signal
	shutdowns chan bool
}

// forward turns PrepareForShutdown signals into Shutdowns until the
// connection ends (godbus closes the signal channel then).
func (s *logindSession) forward() {
	defer close(s.shutdowns)
	for sig := range s.signals {
		if sig.Name != logindInterface+".PrepareForShutdown" || len(sig.Body) != 1 {
			continue
		}
		if down, ok := sig.Body[0].(bool); ok {
			s.shutdowns <- down
		}
	}
}

func (s *logindSession) Shutdowns() <-chan bool { return s.shutdowns }

func (s *logindSession) Close() error { return s.conn.Close() }

func (s *logindSession) InhibitDelayMax() (time.Duration, error) {
	v, err := s.conn.Object(logindService, logindPath).GetProperty(logindInterface + ".InhibitDelayMaxUSec")
	if err != nil {
		return 0, fmt.Errorf("reading logind's InhibitDelayMaxUSec: %w", err)
	}
	usec, ok := v.Value().(uint64)
	if !ok {
		return 0, fmt.Errorf("logind's InhibitDelayMaxUSec is a %T", v.Value())
	}
	if usec > math.MaxInt64/1000 {
		return time.Duration(math.MaxInt64), nil
	}
	return time.Duration(usec) * time.Microsecond, nil
}

// RaiseInhibitDelayMax writes the drop-in and has systemd send logind
// SIGHUP, on which it reads its configuration again.
func (s *logindSession) RaiseInhibitDelayMax(d time.Duration) error {
	if err := os.MkdirAll(s.confDir, 0o755); err != nil {
		return err
	}
	body := fmt.Sprintf("# Written by nodelet (shutdownGracePeriod): logind waits this long for the node's pods to stop.\n[Login]\nInhibitDelayMaxSec=%d\n",
		int64(d.Round(time.Second)/time.Second))
	if err := os.WriteFile(filepath.Join(s.confDir, dropInName), []byte(body), 0o644); err != nil {
		return err
	}
	call := s.conn.Object(systemdService, systemdPath).Call(systemdService+".Manager.KillUnit", 0,
		"systemd-logind.service", "main", int32(syscall.SIGHUP))
	if call.Err != nil {
		return fmt.Errorf("reloading logind's configuration: %w", call.Err)
	}
	return nil
}

// Inhibit takes a delay lock on shutdown: a file descriptor logind waits
// for us to close.
func (s *logindSession) Inhibit() (func() error, error) {
	var fd dbus.UnixFD
	call := s.conn.Object(logindService, logindPath).Call(logindInterface+".Inhibit", 0, "shutdown", inhibitWho, inhibitWhy, "delay")
	if call.Err != nil {
		return nil, call.Err
	}
	if err := call.Store(&fd); err != nil {
		return nil, err
	}
	released := false
	return func() error {
		if released {
			return nil
		}
		released = true
		return syscall.Close(int(fd))
	}, nil
}
