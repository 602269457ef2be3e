# Carousel's developer entry points. `make help` lists them.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -o errexit -o nounset -o pipefail -c
.DEFAULT_GOAL := help

ROOT := $(CURDIR)
BIN := $(ROOT)/bin
TOOLS_MOD := $(ROOT)/hack/tools
CRD_DIR := charts/carousel/files/crds
# CRD, RBAC and webhook manifests generated from the code, for the chart to template.
GENERATED_MANIFESTS := charts/carousel/files

# Test control plane built by `make envtest`; envtest and the suites find it here.
export KUBEBUILDER_ASSETS := $(BIN)/k8s

# Packages whose tests need no API server: everything outside test/, and the test framework's own
# tests (its process handling, with sh and stand-in binaries only).
UNIT_PKGS = $$(go list ./... | grep -v /test/) ./test/framework/
# -trimpath everywhere, as hack/envtest.sh builds the control plane: the Kubernetes libraries the control plane
# and our binaries share (hack/envtest/kube/go.mod pins the same versions as go.mod) compile once on a cold cache.
# The binaries say which Carousel they are (pkg/version): the release in VERSION and the git revision.
VERSION_PKG := github.com/carousel-dev/carousel/pkg/version
REVISION := $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
comma := ,
BUILD_FLAGS := -ldflags '-X $(VERSION_PKG).version=$(shell cat VERSION) -X $(VERSION_PKG).revision=$(REVISION)'
GO_BUILD ?= go build -trimpath $(BUILD_FLAGS)
# What users download (the image, the release archives) leaves out the symbol table and DWARF: half the size;
# a panic still names files and lines. It is dated SOURCE_DATE_EPOCH, by default the last commit's time, so that
# the same sources give the same bytes.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null)
STRIPPED_BUILD_FLAGS = $(subst -ldflags ',-ldflags '-s -w ,$(BUILD_FLAGS))
# Every go test runs with a /tmp of its own (hack/private-tmp.sh): a tmpfs in a mount namespace of its own,
# gone with its last process, so that a run killed before its cleanups leaves no etcd data or keys on the host.
# PRIVATE_TMP=0 keeps the host's /tmp, to look at a failed run's files.
GO_TEST ?= $(CURDIR)/hack/private-tmp.sh go test -trimpath
# Each Ginkgo suite's -ginkgo.timeout is a few minutes under its go test -timeout: a suite out of time is then
# interrupted by Ginkgo, which runs its cleanups (processes, network namespaces, temporary directories that hold
# keys), before go test's own timeout panics and ends the process without them.
GINKGO_ARGS ?= -ginkgo.no-color
BENCH_COUNT ?= 6
BENCH_TIME ?= 1s

# Every Go fuzz target, as <package directory>:<FuzzName>. `make test-unit` runs their seeds,
# `make fuzz` fuzzes each for FUZZ_TIME; both fail when this list and the Fuzz functions differ.
FUZZ_TARGETS := \
	apis/carousel/v1alpha1:FuzzParseOperation \
	pkg/auditwebhook:FuzzDecodingMatchesTheAuditTypes \
	pkg/auditwebhook:FuzzKnownSightingsDeferOnlyWhatObserveDefers \
	pkg/auditwebhook:FuzzPendingSightingsWriteWhatEachBatchWould \
	pkg/campaign:FuzzPlan \
	pkg/controller/cluster:FuzzNameHolder \
	pkg/controller/kubeletbootstrap:FuzzWithOwners \
	pkg/controller/workerrollout:FuzzPlanReplace \
	pkg/controller/workerrollout:FuzzRolloutTime \
	pkg/controller/workerrollout:FuzzPlanRollout \
	pkg/credentials:FuzzKubeconfig \
	pkg/csr:FuzzDecide \
	pkg/csr:FuzzNext \
	pkg/csr:FuzzSign \
	pkg/maintenance:FuzzLeft \
	pkg/maintenance:FuzzWindow \
	pkg/nodeagent:FuzzNextRotation \
	pkg/noderenewal:FuzzParseRequest \
	pkg/oldca:FuzzObserve \
	pkg/oldca:FuzzMaxJSONStringBytes \
	pkg/oldca:FuzzStranded \
	pkg/oldca:FuzzKubeletCertificates \
	pkg/pki:FuzzParseBundle \
	pkg/rotation:FuzzApplyOperation \
	pkg/rotation:FuzzAutomatic \
	pkg/rotation:FuzzDecideServiceAccountKey \
	pkg/rotation:FuzzIssuer \
	pkg/rotation:FuzzLifecycle \
	pkg/rotation:FuzzNext \
	pkg/rotation:FuzzRecommend \
	pkg/webhook/servingcert:FuzzDecide
FUZZ_TIME ?= 1m

CONTROLLER_GEN := $(BIN)/controller-gen
GOLANGCI_LINT := $(BIN)/golangci-lint
BENCHSTAT := $(BIN)/benchstat
HELM := $(BIN)/helm
PROMTOOL := $(BIN)/promtool
CRD_REF_DOCS := $(BIN)/crd-ref-docs
KREW := $(BIN)/krew
VALIDATE_KREW_MANIFEST := $(BIN)/validate-krew-manifest

##@ General

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*##/ { printf "  %-18s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

.PHONY: run
run: envtest build ## Start the local environment (management cluster, operator, managed cluster, 3 nodes) until Ctrl-C.
	$(GO_BUILD) -o $(BIN)/carousel-local-env ./hack/local-env
	$(CURDIR)/hack/private-tmp.sh $(BIN)/carousel-local-env --nodes 3

##@ Build

.PHONY: build
build: ## Build the binaries into bin/.
	$(GO_BUILD) -o $(BIN)/ ./cmd/...

# The release's programs are built as `make build` builds them, stripped; the archives are dated SOURCE_DATE_EPOCH.
RELEASE_DIR := $(BIN)/release
.PHONY: release
release: $(KREW) $(VALIDATE_KREW_MANIFEST) ## Archives of kubectl-carousel and carousel-node-agent per OS/arch, SHA256SUMS and the krew manifest (checked by krew) into bin/release.
	go run -trimpath ./hack/release -version "$$(cat VERSION)" -out $(RELEASE_DIR) \
	  -source-date-epoch "$(SOURCE_DATE_EPOCH)" \
	  -krew $(KREW) -validate-krew-manifest $(VALIDATE_KREW_MANIFEST) -- go build -trimpath $(STRIPPED_BUILD_FLAGS)

# The controller manager's image: static binaries per platform, stripped, as the Dockerfile builds them.
IMAGE_PLATFORMS ?= linux/amd64,linux/arm64
IMAGE_DIR := $(BIN)/image

.PHONY: image
image: ## Build the controller manager's OCI image (IMAGE_PLATFORMS) without a container engine into bin/image/oci; `crane push bin/image/oci <repository>:<tag>` pushes it.
	for platform in $(subst $(comma), ,$(IMAGE_PLATFORMS)); do \
	  CGO_ENABLED=0 GOOS=$${platform%/*} GOARCH=$${platform#*/} go build -trimpath $(STRIPPED_BUILD_FLAGS) \
	    -o $(IMAGE_DIR)/$${platform%/*}-$${platform#*/}/ ./cmd/carousel-controller-manager; \
	done
	go run -trimpath ./hack/image --binaries $(IMAGE_DIR) --platforms $(IMAGE_PLATFORMS) --out $(IMAGE_DIR)/oci \
	  --version $(shell cat VERSION) --revision $(REVISION) --source-date-epoch $(SOURCE_DATE_EPOCH)

.PHONY: generate
generate: $(CONTROLLER_GEN) $(CRD_REF_DOCS) ## Regenerate deepcopy, the typed client (pkg/client), the CRD, RBAC and webhook manifests, the API reference (docs/reference/api.md).
	./hack/update-codegen.sh
	$(CONTROLLER_GEN) crd paths=./apis/... output:crd:artifacts:config=$(CRD_DIR)
	$(CONTROLLER_GEN) rbac:roleName=carousel-controller-manager webhook paths=./pkg/... \
	  output:rbac:artifacts:config=$(GENERATED_MANIFESTS)/rbac output:webhook:artifacts:config=$(GENERATED_MANIFESTS)/webhook
	$(CRD_REF_DOCS) --source-path=apis --config=hack/api-docs/config.yaml --templates-dir=hack/api-docs/templates \
	  --renderer=markdown --output-path=docs/reference/api.md --log-level=WARN --max-depth=12

.PHONY: verify
verify: $(CONTROLLER_GEN) $(GOLANGCI_LINT) ## Check generated code is current and the control plane's module on go.mod's versions, then gofmt, go vet, golangci-lint and the alerting rules' tests.
	./hack/verify-generated.sh
	./hack/verify-shared-versions.sh
	@unformatted=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); \
	  if [[ -n "$$unformatted" ]]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	$(GOLANGCI_LINT) run ./...
	$(MAKE) --no-print-directory test-rules

##@ Test

.PHONY: envtest
envtest: ## Build the test control plane (kube-apiserver, etcd, the kubelet, kube-scheduler, metrics-server, konnectivity, fake-cri, ...) into bin/k8s, unless already there.
	./hack/envtest.sh $(KUBEBUILDER_ASSETS)

# What the suites share is built first, once. Then two lanes run side by side: the end-to-end suite, the
# longest, then the sharding suite, and the others one after the other; each lane's output is printed when it
# ends. The end-to-end suite checks the host's network namespaces only for its own processes and orphans
# (test/framework/hoststate.go), so the chart suite's kubelet environment beside it does not disturb it.
.PHONY: test
test: envtest build $(HELM) ## Run every test suite (what CI runs).
	$(MAKE) --no-print-directory -j2 --output-sync=target test-lane-e2e test-lane-others

.PHONY: test-lane-e2e
test-lane-e2e:
	for suite in test-e2e test-sharding; do $(MAKE) --no-print-directory "$${suite}"; done

.PHONY: test-lane-others
test-lane-others:
	for suite in test-unit test-integration test-kubeadm chart-test test-rules; do $(MAKE) --no-print-directory "$${suite}"; done

.PHONY: test-unit
test-unit: fuzz-targets ## Unit tests (every fuzz target's seed corpus included): no API server needed.
	$(GO_TEST) -count=1 $(UNIT_PKGS)

.PHONY: fuzz
fuzz: fuzz-targets ## Every fuzz target for FUZZ_TIME (1m) each; an input that fails is kept in <package>/testdata/fuzz. CI runs it with FUZZ_TIME=3s.
	$(call fuzz,$(FUZZ_TIME))

# fuzz-targets checks that FUZZ_TARGETS names exactly the Fuzz functions outside test/
# (`go test -fuzz` passes when its pattern matches nothing).
.PHONY: fuzz-targets
fuzz-targets:
	@declared=$$({ grep -rEo --include='*_test.go' --exclude-dir={.git,bin,test} '^func Fuzz[A-Za-z0-9_]*' . || true; } \
	  | sed -E 's|^\./(.*)/[^/]*:func (.*)|\1:\2|' | sort -u); \
	listed=$$(printf '%s\n' $(FUZZ_TARGETS) | sort -u); \
	if [[ "$$declared" != "$$listed" ]]; then \
	  echo "FUZZ_TARGETS in the Makefile does not match the Fuzz functions (<: only declared, >: only listed):"; \
	  diff <(echo "$$declared") <(echo "$$listed") | grep '^[<>]'; exit 1; \
	fi

# $(call fuzz,<time>) fuzzes each target for <time>, going on after a failure and failing at the
# end. A run that ends in a bare "context deadline exceeded" without writing a failing input is
# Go's fuzz-coordinator race at the -fuzztime deadline (golang/go#75804, fixed in Go 1.27), not a
# finding: that target is run once more.
define fuzz
	@failed=(); \
	for target in $(FUZZ_TARGETS); do \
	  echo "fuzz: $${target} for $(1)"; \
	  for try in 1 2; do \
	    out=$$($(GO_TEST) -run '^$$' -fuzz "^$${target#*:}\$$" -fuzztime $(1) "./$${target%%:*}" 2>&1) && { echo "$${out}" | tail -1; break; }; \
	    echo "$${out}" | tail -20; \
	    if [[ $${try} == 2 || "$${out}" == *"Failing input written to"* || "$${out}" != *"context deadline exceeded"* ]]; then \
	      failed+=("$${target}"); break; \
	    fi; \
	    echo "fuzz: $${target}: the coordinator's deadline race (golang/go#75804), no input failed; once more"; \
	  done; \
	done; \
	if (( $${#failed[@]} > 0 )); then echo "fuzz targets that failed: $${failed[*]}"; exit 1; fi
endef

.PHONY: test-integration
test-integration: envtest ## Ginkgo suites against a real kube-apiserver and etcd.
	$(GO_TEST) -count=1 -timeout 30m ./test/integration/... -ginkgo.timeout 27m $(GINKGO_ARGS)

.PHONY: test-sharding
test-sharding: envtest build $(HELM) ## Three manager processes as shards of kubernetes-controller-sharding's sharder, with the chart's RBAC: assignment, a killed shard's Clusters picked up, no Cluster written by two shards.
	HELM=$(HELM) CAROUSEL_MANAGER=$(BIN)/carousel-controller-manager $(GO_TEST) -count=1 -v -timeout 15m ./test/sharding/... -ginkgo.timeout 12m $(GINKGO_ARGS)

.PHONY: test-kubeadm
test-kubeadm: envtest ## kubeadm's own token discovery (k8s.io/kubernetes v1.36.3, a module of its own) against the cluster-info Carousel signs.
	cd test/kubeadm && $(GO_TEST) -count=1 -timeout 20m ./...

.PHONY: test-e2e
test-e2e: envtest build ## End-to-end suites: the binaries against a managed cluster running on Carousel's certificates.
	$(GO_TEST) -count=1 -v -timeout 40m ./test/e2e/... -ginkgo.timeout 36m $(GINKGO_ARGS)

.PHONY: bench
bench: $(BENCHSTAT) envtest ## Go benchmarks (benchstat summary in bin/bench.txt), then 500 kubelet bootstraps: Carousel vs kube-controller-manager, then the fleet, the managed connections and a fleet's audit traffic.
	$(GO_TEST) -run '^$$' -bench . -benchmem -benchtime $(BENCH_TIME) -count $(BENCH_COUNT) $(UNIT_PKGS) | tee $(BIN)/bench.txt
	$(BENCHSTAT) $(BIN)/bench.txt
	$(GO_TEST) -run '^$$' -bench BenchmarkKubeletBootstrap -benchtime 1x -timeout 20m ./test/bench/ | tee $(BIN)/bench-bootstrap.txt
	$(MAKE) --no-print-directory bench-fleet
	$(MAKE) --no-print-directory bench-connections
	$(MAKE) --no-print-directory bench-audit

# FLEET_CLUSTERS (1000) Clusters and the manager binary on one API server; FLEET_IDLE (1m) is the idle window;
# FLEET_CAMPAIGN_MAX_CONCURRENT (100%) the waves of the RotationCampaign that rotates the fleet a second time;
# FLEET_MANAGER_FLAGS adds flags to the manager's (for example --cluster-concurrency=1), FLEET_MANAGER_ENV variables to its
# environment (for example GOMEMLIMIT=460MiB); FLEET_PROFILE_DIR, if set, gets
# the manager's CPU profiles of the fleet's first 20 s and of the idle window, the API server's of the fleet's first
# 20 s and of the first rotation's, and the manager's heap profiles halfway through the first rotation and at the
# end (go tool pprof reads them).
.PHONY: bench-fleet
bench-fleet: envtest build ## One manager and a fleet of Clusters: time to Ready, CPU per Cluster, idle writes and CPU, a rotation of all, peak RSS, where the machine's CPU went (bin/bench-fleet.txt).
	CAROUSEL_MANAGER=$(BIN)/carousel-controller-manager $(GO_TEST) -run '^$$' -bench BenchmarkFleet -benchtime 1x -timeout 60m ./test/bench/ | tee $(BIN)/bench-fleet.txt

# CONNECTIONS (20) Clusters whose endpoints are real control planes, an etcd and a kube-apiserver each.
.PHONY: bench-connections
bench-connections: envtest build ## What one managed-cluster connection costs the manager (heap, RSS, goroutines, watches), projected to 1,000 (bin/bench-connections.txt).
	CAROUSEL_MANAGER=$(BIN)/carousel-controller-manager $(GO_TEST) -run '^$$' -bench BenchmarkManagedConnections -benchtime 1x -timeout 30m ./test/bench/ | tee $(BIN)/bench-connections.txt

# AUDIT_CLUSTERS (200) Clusters of AUDIT_CLIENTS (150) clients each send AUDIT_BATCHES_PER_SECOND (40) batches of
# 400 audit events in all for AUDIT_WINDOW (2m).
.PHONY: bench-audit
bench-audit: envtest build ## A fleet's audit traffic through one manager's receiver: CPU per batch, live heap, reads and writes of the usage records (bin/bench-audit.txt).
	CAROUSEL_MANAGER=$(BIN)/carousel-controller-manager $(GO_TEST) -run '^$$' -bench BenchmarkAuditTraffic -benchtime 1x -timeout 20m ./test/bench/ | tee $(BIN)/bench-audit.txt

.PHONY: chart-test
chart-test: envtest build $(HELM) ## Helm chart: lint, values schema, install on a real API server and a rotation run as the chart's ServiceAccount.
	HELM=$(HELM) $(GO_TEST) -count=1 -v -timeout 20m ./test/chart/... -ginkgo.timeout 17m $(GINKGO_ARGS)

# The chart's PrometheusRule, rendered by helm, under `promtool test rules` (test/rules/testdata), and every
# alert's runbook in docs/runbooks. In `make test` it runs last in the lane beside the end-to-end suite, which ends
# about two minutes after that lane; `make verify`, which CI runs first, has built promtool by then.
.PHONY: test-rules
test-rules: $(HELM) $(PROMTOOL) ## The chart's alerting rules under promtool's unit tests, and a runbook for every alert.
	HELM=$(HELM) PROMTOOL=$(PROMTOOL) $(GO_TEST) -count=1 ./test/rules/

##@ Tools (pinned in hack/tools/go.mod)

$(BIN)/%: $(TOOLS_MOD)/go.mod $(TOOLS_MOD)/go.sum
	@mkdir -p $(BIN)
	cd $(TOOLS_MOD) && go build -o $@ $$(grep -o '"[^"]*/$*"' tools.go | tr -d '"')

# Without a cluster (helm template, helm lint), helm renders for the Kubernetes version linked in; link
# the one the tests run, so that the chart's kubeVersion constraint holds.
HELM_LDFLAGS := $(foreach pkg,chartutil lint/rules,-X helm.sh/helm/v3/pkg/$(pkg).k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/$(pkg).k8sVersionMinor=36)
$(HELM): $(TOOLS_MOD)/go.mod $(TOOLS_MOD)/go.sum
	@mkdir -p $(BIN)
	cd $(TOOLS_MOD) && go build -ldflags '$(HELM_LDFLAGS)' -o $@ helm.sh/helm/v3/cmd/helm

# promtool is pinned in a module of its own, hack/tools/promtool: the Prometheus module's dependencies would
# move those of the tools above. remove_all_sd leaves out the service discoveries and their cloud SDKs, which
# rule tests do not use: that more than halves the build (about 200 CPU-seconds on an empty Go cache).
$(PROMTOOL): $(TOOLS_MOD)/promtool/go.mod $(TOOLS_MOD)/promtool/go.sum
	@mkdir -p $(BIN)
	cd $(TOOLS_MOD)/promtool && go build -trimpath -tags remove_all_sd -o $@ github.com/prometheus/prometheus/cmd/promtool

# crd-ref-docs, which writes the API reference, is pinned in a module of its own, hack/tools/crd-ref-docs, for the
# same reason: its dependencies would move those of the tools in hack/tools.
$(CRD_REF_DOCS): $(TOOLS_MOD)/crd-ref-docs/go.mod $(TOOLS_MOD)/crd-ref-docs/go.sum
	@mkdir -p $(BIN)
	cd $(TOOLS_MOD)/crd-ref-docs && go build -trimpath -o $@ github.com/elastic/crd-ref-docs

.PHONY: tools
tools: $(CONTROLLER_GEN) $(GOLANGCI_LINT) $(BENCHSTAT) $(BIN)/ginkgo $(HELM) $(PROMTOOL) $(CRD_REF_DOCS) $(KREW) $(VALIDATE_KREW_MANIFEST) ## Build every pinned tool.

.PHONY: clean
clean: ## Remove build output (keeps the cached control plane in bin/k8s).
	find $(BIN) -maxdepth 1 -type f -delete 2>/dev/null || true
