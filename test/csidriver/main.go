// Command csidriver runs the test CSI driver (internal/csitest) as its own
// process, as a node plugin's container runs beside the kubelet: it
// serves CSI and plugin registration on unix sockets until SIGTERM, then
// removes its sockets (as node-driver-registrar does) and exits.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/nodelet/nodelet/internal/csitest"
)

func main() {
	var o csitest.Options
	flag.StringVar(&o.Name, "name", "", "the driver's name")
	flag.StringVar(&o.RegistryDir, "registry-dir", "", "the kubelet's plugins_registry directory")
	flag.StringVar(&o.Dir, "dir", "", "the directory for the CSI socket and the volumes' backing directories")
	flag.BoolVar(&o.Stage, "stage", false, "offer STAGE_UNSTAGE_VOLUME")
	flag.StringVar(&o.CallLog, "call-log", "", "a file each node call is appended to")
	flag.Parse()
	if o.Name == "" || o.RegistryDir == "" || o.Dir == "" {
		fmt.Fprintln(os.Stderr, "csidriver: -name, -registry-dir and -dir are required")
		os.Exit(2)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	d, err := csitest.Start(o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "csidriver: %v\n", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "csidriver: %s serving on %s, registered at %s\n", o.Name, d.CSISock, d.RegSock)
	<-stop
	d.Stop()
}
