# nodelet: a Kubernetes node agent. Every target runs as root (it drives
# containerd); each sets the machine up first if it needs to.

GO ?= go
export PATH := $(PATH):/usr/local/go/bin
# As upstream's release builds: no DWARF or symbol table (a quarter of the
# binary; stack traces and profiles keep their names). Link flags only, so
# the build cache is the tests' too.
BUILDFLAGS := -ldflags "-s -w"

.PHONY: all setup build run cluster-up clean-pods test test-long test-subpath-race test-validation-diff fuzz-validation test-upgrades test-node-conformance unit integration lint bench bench-density bench-scale faults fuzz clean

all: build

# Everything the tests and cluster mode need; the standalone demo (make
# run) sets up only what it needs, without the control plane.
setup:
	bash hack/setup.sh --cluster

build:
	$(GO) build $(BUILDFLAGS) -o _output/nodelet ./cmd/nodelet

# Run nodelet standalone on the example static pods.
run:
	bash hack/run-demo.sh

# Run a one-node cluster: the upstream control plane with nodelet as its
# node (kubectl: export KUBECONFIG=_output/admin.kubeconfig).
cluster-up:
	bash hack/cluster-up.sh

# Remove every pod nodelet runs on this node (e.g. after the demo).
clean-pods:
	bash hack/clean-pods.sh

# Everything: formatting, vet, unit and integration tests, all with the
# race detector (integration tests also build nodelet with it).
test: setup lint
	GO=$(GO) bash hack/test-integration.sh

lint:
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# The tests that wait out real time, kept out of make test: a node that
# joined with a bootstrap token keeps its API access past the expiry of
# certificates issued for 5 minutes (about 12 minutes).
test-long: setup
	$(GO) test -v -race -count=1 -timeout 30m -tags integration,long ./test/integration/long/

# The subPath race (CVE-2021-25741) on both runtimes at once: a container
# swaps its subPath directory for a link to / while another restarts 200
# times mounting it (about 10 minutes).
test-subpath-race: setup
	GO=$(GO) bash hack/test-subpath-race.sh

# nodelet's static pod validation against the API server's own
# (hack/validationdiff, a module of its own that imports k8s.io/kubernetes):
# the corpus, then FUZZTIME of fuzzing.
FUZZTIME ?= 30m
test-validation-diff:
	cd hack/validationdiff && $(GO) test -count=1 ./...
fuzz-validation:
	cd hack/validationdiff && $(GO) test -run '^$$' -fuzz FuzzValidation -fuzztime $(FUZZTIME) .

# Hand nodes from the upstream kubelets of the previous minor versions
# (v1.35, v1.36; built once, about 5 minutes each, and cached) to nodelet.
test-upgrades: setup
	NODELET_OLD_KUBELETS="$$(bash hack/cluster/build-kubelets.sh)" $(GO) test -v -race -count=1 -timeout 30m -tags integration,upgrades ./test/integration/upgrades/

# Upstream's node conformance suite (test/e2e_node's [NodeConformance]
# specs outside [Serial], [Slow], [Disruptive] and [Flaky]; about 430),
# every one, 8 in parallel as upstream's CI runs them (about 45 minutes;
# the suite and its images are built once, about 15 minutes, and cached).
# make test runs the subset in test/nodeconformance/testdata/subset.txt.
# AGENT=upstream runs it against the upstream kubelet v1.37.2: its count
# is the bar. MODE=harness lets the suite's own launcher start the agent.
# FOCUS= narrows the specs to those a regular expression matches.
AGENT ?= nodelet
MODE ?= conformance
FOCUS ?=
test-node-conformance: setup
	$(GO) test -v -count=1 -timeout 4h -tags integration ./test/nodeconformance/ -run TestNodeConformance \
		-args -conformance.all -conformance.agent=$(AGENT) -conformance.mode=$(MODE) -conformance.focus='$(FOCUS)'

unit:
	$(GO) test -race -count=1 ./...

integration: setup
	GO=$(GO) bash hack/test-integration.sh

# Benchmarks: start-up latency against the raw CRI cost, delete to
# terminated against StopContainer, and manifest write to ADD; on the
# host's containerd 1.6, then on containerd 2.x.
bench: setup
	$(GO) test -tags integration -run XXX -bench . -benchtime 3x -timeout 60m ./test/integration/standalone/
	$(GO) test -tags integration -run XXX -bench 'ExitSeen|DeleteToTerminated' -benchtime 10x -timeout 30m ./test/integration/runtime/
	NODELET_TEST_CONTAINERD=2 $(GO) test -tags integration -run XXX -bench . -benchtime 3x -timeout 60m ./test/integration/standalone/
	NODELET_TEST_CONTAINERD=2 $(GO) test -tags integration -run XXX -bench 'ExitSeen|DeleteToTerminated' -benchtime 10x -timeout 30m ./test/integration/runtime/
	$(GO) test -run XXX -bench . -benchtime 200x ./pkg/pods/podsources/

# Density in cluster mode: 1, 30 and 110 pods created through the API at
# once, then deleted, three rounds on one nodelet, beside the raw CRI floor.
bench-density: setup
	$(GO) test -tags integration -run XXX -bench Density -benchtime 1x -timeout 90m ./test/integration/density/ $(BENCHFLAGS)

# nodelet's own cost at 110, 500, 1000 and 5000 pods, against the fake
# CRI (a runtime that costs nothing): CPU per pod start and stop, the
# steady cost, memory per pod, the sync loop; and how each grows; then
# what finding the statuses to write costs the API syncer per change.
# Needs no control plane or containerd (about 10 minutes).
bench-scale:
	$(GO) test -tags integration -run XXX -bench Scale -benchtime 1x -timeout 60m ./test/scale/ $(BENCHFLAGS)
	$(GO) test -run XXX -bench SyncerBurst -benchtime 3x ./pkg/pods/podstatus/

# The fault-injection suite at upstream's maxPods (make test runs it with
# 36), ending with its table: scenario, load, fault, time to converge,
# invariants checked. -v, because go test shows a passing package's
# output (the table) only then.
faults: setup
	$(GO) test -v -race -count=1 -timeout 60m -tags integration ./test/faults/ -args -faults.pods=110

# Each fuzz target for a minute; their corpora (testdata/fuzz) replay in
# every plain test run.
fuzz:
	$(GO) test -run XXX -fuzz FuzzDecodeManifest -fuzztime 60s ./pkg/pods/podsources/
	$(GO) test -run XXX -fuzz FuzzHTTPSource -fuzztime 60s ./pkg/pods/podsources/
	$(GO) test -run XXX -fuzz FuzzContainerLogsQuery -fuzztime 60s ./pkg/kubeletapi/server/

clean:
	rm -rf _output
