// Command staticuid prints the UIDs the upstream kubelet gives static pods:
// it runs the upstream kubelet's own file source and pod config on a
// directory of manifests, as the kubelet does, and prints each pod's name
// and UID. pkg/podsources's TestStaticPodUIDIsUpstreams compares nodelet's
// UIDs with its output (pkg/podsources/testdata/staticuid/golden.txt).
//
// Usage (from hack/cluster/tools):
//
//	go run ./staticuid -manifests ../../../pkg/podsources/testdata/staticuid -node NODE -dir DIR > golden.txt
//
// The manifests are copied into DIR first: a static pod's UID depends on
// its file's path, and the test hashes the same path.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/config"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
)

type noSLI struct{}

func (noSLI) ObservedPodOnWatch(klog.Logger, *v1.Pod, time.Time) {}

func main() {
	manifests := flag.String("manifests", "", "directory of manifests")
	node := flag.String("node", "node-a", "node name")
	dir := flag.String("dir", "/tmp/nodelet-staticuid/manifests", "directory the kubelet reads them from")
	flag.Parse()
	if err := os.RemoveAll(*dir); err != nil {
		log.Fatal(err)
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		log.Fatal(err)
	}
	files, err := os.ReadDir(*manifests)
	if err != nil {
		log.Fatal(err)
	}
	want := 0
	for _, f := range files {
		if filepath.Ext(f.Name()) == ".txt" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(*manifests, f.Name()))
		if err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(*dir, f.Name()), b, 0o644); err != nil {
			log.Fatal(err)
		}
		want++
	}
	ctx := context.Background()
	cfg := config.NewPodConfig(record.NewFakeRecorder(100), noSLI{})
	config.NewSourceFile(klog.Background(), *dir, types.NodeName(*node), time.Hour, cfg.Channel(ctx, kubetypes.FileSource))
	lines := map[string]string{}
	deadline := time.After(30 * time.Second)
	for len(lines) < want {
		select {
		case u := <-cfg.Updates():
			for _, p := range u.Pods {
				lines[p.Name] = string(p.UID)
			}
		case <-deadline:
			log.Fatalf("only %d of %d manifests became pods (an invalid one?): %v", len(lines), want, lines)
		}
	}
	var out []string
	for name, uid := range lines {
		out = append(out, name+" "+uid)
	}
	sort.Strings(out)
	fmt.Printf("# node %s, manifests in %s (go run ./staticuid in hack/cluster/tools)\n", *node, *dir)
	for _, l := range out {
		fmt.Println(l)
	}
}
