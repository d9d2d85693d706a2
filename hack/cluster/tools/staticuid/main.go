// Command staticuid prints the UIDs the upstream kubelet gives static pods:
// it runs the upstream kubelet's own file source and pod config on a
// directory of manifests, as the kubelet does, and prints each pod's name
// and UID. pkg/pods/podsources's TestStaticPodUIDIsUpstreams compares nodelet's
// UIDs with its output (pkg/pods/podsources/testdata/staticuid/golden.txt).
//
// Usage (from hack/cluster/tools):
//
//	go run ./staticuid -manifests ../../../pkg/pods/podsources/testdata/staticuid -node NODE -dir DIR > golden.txt
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
	"reflect"
	"runtime/debug"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/config"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
)

// The start-up SLI observer NewPodConfig wants: v1.37's, and v1.35's and
// v1.36's (without a logger).
type noSLI struct{}

func (noSLI) ObservedPodOnWatch(klog.Logger, *v1.Pod, time.Time) {}

type noSLIv136 struct{}

func (noSLIv136) ObservedPodOnWatch(*v1.Pod, time.Time) {}

// newPodConfig calls NewPodConfig as the kubelet this is built against
// declares it (the program is shared by hack/cluster/tools and
// hack/cluster/kubelet-v1.NN): v1.35 also takes a notification mode
// (incremental, 3), and the observer's method lost its logger before v1.37.
func newPodConfig() *config.PodConfig {
	fn := reflect.ValueOf(config.NewPodConfig)
	offers := []reflect.Value{reflect.ValueOf(record.NewFakeRecorder(100)), reflect.ValueOf(noSLI{}), reflect.ValueOf(noSLIv136{})}
	var args []reflect.Value
	for i := range fn.Type().NumIn() {
		in := fn.Type().In(i)
		if in.Kind() == reflect.Int {
			args = append(args, reflect.ValueOf(3).Convert(in))
			continue
		}
		for _, o := range offers {
			if o.Type().Implements(in) {
				args = append(args, o)
				break
			}
		}
	}
	return fn.Call(args)[0].Interface().(*config.PodConfig)
}

// kubeletModule names the tools module this was built in.
func kubeletModule() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		return filepath.Base(info.Main.Path)
	}
	return "tools"
}

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
	cfg := newPodConfig()
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
	fmt.Printf("# node %s, manifests in %s (go run ./staticuid in hack/cluster/%s)\n", *node, *dir, kubeletModule())
	for _, l := range out {
		fmt.Println(l)
	}
}
