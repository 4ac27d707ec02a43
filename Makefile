# stands-reconciler — build, test and lint. `make demo` runs the reconciler's whole loop on the example
# repository (local Gitea, Vault, hcloudsim). CI runs .ci/run: `make tools`, `lint`, `test`, `demo-check`
# and `faults-short`, with `make e2e` beside them (docs/development.md#how-ci-runs).
GO           ?= go
BIN          := bin
STATICCHECK  := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# A count, not a duration: Go 1.26's fuzz coordinator can fail a clean run with "context deadline
# exceeded" when a -fuzztime duration ends under load (go.dev/issue/75804, fixed in 1.27). ~20 s here.
FUZZTIME     ?= 200000x
VERSION      ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
# Every binary reports it (internal/version); -X main.version, stamped by earlier packaging, still works.
LDFLAGS      := -X github.com/stands-engine/stands-reconciler/internal/version.Version=$(VERSION)
DEMO_OUT     ?= _render

.PHONY: deb check deploy-check all build test unit soak fuzz lint demo demo-check demo-down demo-tools browser-tools browser-check screenshots render demo-apply clean tools deps vm-image e2e bench faults faults-short alerts

# Tools the tests run for real, each built from the Go module proxy in a module of its own under
# tools/ (their dependency graphs never mix with ours). File targets: `make -q tools` is true once built.
PULUMI_VERSION := $(shell awk '$$1 == "github.com/pulumi/pulumi/sdk/v3" {print $$2}' tools/pulumi/go.mod)
GITEA_VERSION  := $(shell awk '$$1 == "code.gitea.io/gitea" {print $$2}' tools/gitea/go.mod)
TOOLS          := $(BIN)/pulumi $(BIN)/gitea $(BIN)/vault $(BIN)/versitygw $(BIN)/nfpm

all: lint test build

build: $(BIN)/stands-reconciler $(BIN)/hcloudsim $(BIN)/stands-demo

# Always rebuilt: go's own cache makes this cheap and keeps -X version honest.
.PHONY: $(BIN)/stands-reconciler $(BIN)/hcloudsim $(BIN)/stands-demo
$(BIN)/stands-reconciler:
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $@ ./cmd/stands-reconciler
$(BIN)/hcloudsim:
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $@ ./cmd/hcloudsim
$(BIN)/stands-demo:
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $@ ./cmd/stands-demo

tools: $(TOOLS)

# Without the version stamp `pulumi version` prints nothing and the Automation API refuses the CLI.
$(BIN)/pulumi: tools/pulumi/go.mod tools/pulumi/go.sum
	cd tools/pulumi && $(GO) build -trimpath \
	  -ldflags "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$(PULUMI_VERSION)" \
	  -o ../../$@ github.com/pulumi/pulumi/pkg/v3/cmd/pulumi

$(BIN)/gitea: tools/gitea/go.mod tools/gitea/go.sum
	cd tools/gitea && CGO_ENABLED=1 $(GO) build -trimpath -tags "sqlite sqlite_unlock_notify" \
	  -ldflags "-X main.Version=$(GITEA_VERSION:v%=%)" -o ../../$@ code.gitea.io/gitea
	cd tools/gitea && $(GO) list -m -f '{{.Dir}}' code.gitea.io/gitea > ../../$(BIN)/gitea.static-root

# Vault's version comes from its embedded VERSION file: `bin/vault version` says v1.21.0 unstamped.
$(BIN)/vault: tools/vault/go.mod tools/vault/go.sum
	cd tools/vault && $(GO) build -trimpath -o ../../$@ github.com/hashicorp/vault

# versitygw: a real S3-compatible server over a folder, for the S3 contract run and the fault suite.
$(BIN)/versitygw: tools/versitygw/go.mod tools/versitygw/go.sum
	cd tools/versitygw && $(GO) build -trimpath -o ../../$@ github.com/versity/versitygw/cmd/versitygw

# nfpm: writes the Debian package (make deb) from deploy/nfpm.yaml.
$(BIN)/nfpm: tools/nfpm/go.mod tools/nfpm/go.sum
	cd tools/nfpm && $(GO) build -trimpath -o ../../$@ github.com/goreleaser/nfpm/v2/cmd/nfpm

# Debian packages the tests need (idempotent; installs only what is missing).
deps:
	scripts/install-deps.sh

# The fast loop (docs/development.md): build, vet, staticcheck and every test that needs no real
# server (-short: testenv.NeedsServer skips the rest), without -race. Under 3 minutes warm.
check:
	$(GO) build ./...
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	$(GO) test -short -count=1 ./...

# The test command (README, .ci/run): a short fuzz of the manifest parser, then every test with -race.
test: fuzz unit soak

# The Vault contract suite runs verbose on its own, so CI's log lists every case the real Vault passed.
# UNIT_TIMEOUT is per package, a guard against a hung test, not a budget: cmd/stands-reconciler's
# tests take 17.6 min alone under -race on 2 cores (2026-12-05: TestStandsExpireThroughGit 253 s,
# TestPullRequestPlans 173 s), engine's about as long, and past 30 min each beside the VM tests.
# go test's own vet pass (a subset of go vet's checks, per package) is off: go vet ./... ran just before,
# unless VETTED=1 says `make lint` has just vetted the same files (.ci/run: lint's go vet -tags e2e
# ./... builds every file a plain go vet builds, as no file of the module is built only without a tag).
UNIT_TIMEOUT ?= 45m
unit:
	$(if $(VETTED),@echo "unit: go vet skipped (VETTED: make lint vetted these files)",$(GO) vet ./...)
	$(GO) test -race -count=1 -vet=off -v -run '^TestVaultContract$$' ./vault/
	$(GO) test -race -count=1 -vet=off -timeout $(UNIT_TIMEOUT) -skip '^(TestVaultContract|TestSoak)$$' ./...

# 500 no-op cycles of the daemon against the real Pulumi CLI: nothing may pile up (fds, goroutines,
# folders, RSS). Without -race: the detector's own memory and speed are not what production runs, and
# the loop's races are the unit run's job. Verbose, so CI's log has the numbers.
soak:
	$(GO) test -count=1 -v -run '^TestSoak$$' ./cmd/stands-reconciler/

# End-to-end tests on real VMs (hcloudsim's VM backend, tag e2e): the Debian image is built once by
# scripts/vm-image.sh into $${STANDS_VM_DIR:-/var/tmp/stands-vm} and reused while its recipe is unchanged.
vm-image:
	scripts/vm-image.sh

E2E_TIMEOUT ?= 75m
e2e: vm-image
	$(GO) test -tags e2e -count=1 -p 1 -timeout $(E2E_TIMEOUT) -run 'E2E' -v ./hcloudsim/vm/ ./engine/

# Measurements at 1,000, 3,000 and 10,000 stands (bench/, tag bench; BENCH_STANDS picks the sizes):
# writes bench/results.md, docs/performance.md and its plot. Not part of test: it runs past an hour.
bench: tools
	$(GO) test -tags bench -count=1 -timeout 240m -v -run '^TestBench$$' ./bench/

# The fault suite (bench/faults_test.go, tag faults): each fault brought into one running daemon and
# taken away, the recovery time printed, and after each: no orphan, no stale lock, no wrong destroy,
# no secret in logs or the repository. faults-short is the subset .ci/run runs (~6 min).
faults: tools
	$(GO) test -tags faults -count=1 -timeout 90m -v -run '^TestFaults$$' ./bench/

faults-short: tools
	FAULTS=short $(GO) test -tags faults -count=1 -timeout 30m -v -run '^TestFaults$$' ./bench/

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzPreflight$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./manifest

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags e2e ./...
	$(GO) vet -tags bench,faults ./bench/
	$(GO) run $(STATICCHECK) -tags e2e ./...
	$(GO) run $(STATICCHECK) -tags bench,faults ./bench/
	$(MAKE) --no-print-directory deploy-check

# The unit (systemd-analyze verify, any warning an error: ExecStart stands in for the binary, which the
# check does not run; its security exposure printed and held at 1.5 or less, as the VM test holds it on
# a running unit), the alert rules (promtool, Debian's prometheus package) and the package's maintainer
# scripts (dash, the /bin/sh that runs them).
deploy-check:
	@d=$$(mktemp -d) && sed 's|^ExecStart=.*|ExecStart=/bin/true|' deploy/stands-reconciler.service > $$d/stands-reconciler.service && \
	  out=$$(systemd-analyze verify --man=no $$d/stands-reconciler.service 2>&1); \
	  if [ -n "$$out" ]; then rm -rf $$d; echo "$$out"; echo "deploy: the unit has problems (systemd only warns and ignores them)"; exit 1; fi; \
	  echo "deploy: unit verified"; \
	  sec=$$(systemd-analyze security --offline=true --threshold=15 --no-pager $$d/stands-reconciler.service 2>&1); rc=$$?; rm -rf $$d; \
	  echo "$$sec" | grep -E '^✗|Overall exposure' | sed 's/^/deploy: /'; \
	  if [ $$rc -ne 0 ]; then echo "deploy: the unit's exposure is above 1.5"; exit 1; fi
	promtool check rules deploy/alerts.yml
	@for s in deploy/deb/postinst deploy/deb/prerm deploy/deb/postrm; do dash -n $$s || exit 1; done; echo "deploy: maintainer scripts parse"

# The Debian package (docs/operations.md, "The Debian package"): $(DEB_DIR)/stands-reconciler_$(DEB_VERSION)_amd64.deb.
# The version orders builds by their commit's time, so a later commit's package is an upgrade and an
# earlier one's a downgrade; give DEB_VERSION to number a release.
DEB_VERSION ?= 0.$(shell git log -1 --format=%cd --date=format:%Y%m%d%H%M%S 2>/dev/null || echo 0)+g$(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
DEB_DIR     ?= _out
deb: $(BIN)/nfpm $(BIN)/pulumi
	@rm -rf _out/deb && mkdir -p _out/deb $(DEB_DIR)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-X github.com/stands-engine/stands-reconciler/internal/version.Version=$(DEB_VERSION)" -o _out/deb/stands-reconciler ./cmd/stands-reconciler
	cp $(BIN)/pulumi _out/deb/pulumi
	DEB_VERSION=$(DEB_VERSION) $(BIN)/nfpm package -f deploy/nfpm.yaml -p deb -t $(DEB_DIR)/

# The alert rules for a site whose Prometheus scrape job for the daemon is ALERTS_JOB, with runbook links
# under RUNBOOK_BASE (docs/runbooks.md, "The rules' two site settings"): _out/alerts.yml.
ALERTS_JOB   ?= stands-reconciler
RUNBOOK_BASE ?= https://github.com/stands-engine/stands-reconciler/blob/main/docs/runbooks.md
alerts:
	@mkdir -p _out && deploy/alerts.sh "$(ALERTS_JOB)" "$(RUNBOOK_BASE)" < deploy/alerts.yml > _out/alerts.yml.tmp && \
	  promtool check rules _out/alerts.yml.tmp >/dev/null && mv _out/alerts.yml.tmp _out/alerts.yml && echo "alerts: _out/alerts.yml for job $(ALERTS_JOB)"

# The main job on the embedded default: the reconciler's whole loop on the example stands repository,
# on 127.0.0.1 under _demo/ (cmd/stands-demo): local Gitea, a real Vault, hcloudsim, the reconciler; a
# pull request planned, approved, merged and applied. Runs until Ctrl-C; `make demo-down` cleans up.
# The tools are built once (scripts/demo-tools.sh says what and how long). DEMO_NODES=full makes the
# servers QEMU VMs, set up over SSH with their apps under Podman: the VM image is built once (make
# vm-image), the apps' image is bin/stands-testapp.
DEMO_NODES   ?= servers
DEMO_FULL    := $(if $(filter full,$(DEMO_NODES)),vm-image $(BIN)/stands-testapp)
demo: demo-tools browser-tools build $(DEMO_FULL)
	$(BIN)/stands-demo -nodes $(DEMO_NODES) up

# The same story headless, every step asserted, within a time bound (CI runs it).
DEMO_TIMEOUT ?= $(if $(filter full,$(DEMO_NODES)),60m,15m)
demo-check: demo-tools browser-tools build $(DEMO_FULL)
	$(BIN)/stands-demo -nodes $(DEMO_NODES) -timeout $(DEMO_TIMEOUT) check

# The README's pictures (docs/img/), taken by demo-check's browser run.
screenshots: demo-tools browser-tools build
	$(BIN)/stands-demo -nodes servers -timeout 15m -screenshots docs/img check

# What DEMO_NODES=full's VMs pull: a static binary that serves the example's kv and web alike.
.PHONY: $(BIN)/stands-testapp
$(BIN)/stands-testapp:
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o $@ ./cmd/stands-testapp

demo-down:
	@if [ -x $(BIN)/stands-demo ]; then $(BIN)/stands-demo down; else rm -rf _demo; fi

demo-tools:
	@scripts/demo-tools.sh

# What renders the pages reviewers read: playwright-core (npm, locked) driving Debian's chromium, and
# Gitea's web front end, which a Gitea built from the Go module proxy lacks (scripts/gitea-frontend.sh).
GITEA_WEB := $(BIN)/gitea-web/.built
# The browser tests install the first part themselves (testenv.Browse, browser-check), on first need.
browser-tools: browser-check $(GITEA_WEB)
browser-check: tools/browser/node_modules/playwright-core/package.json

tools/browser/node_modules/playwright-core/package.json: tools/browser/package.json tools/browser/package-lock.json
	cd tools/browser && npm ci --no-audit --no-fund

$(GITEA_WEB): $(BIN)/gitea tools/browser/node_modules/playwright-core/package.json
	scripts/gitea-frontend.sh

# Validate the example stands repository and render every stand (with reserved test addresses) into
# $(DEMO_OUT)/. The example's secrets come from examples/demo.env.
render: $(BIN)/stands-reconciler
	set -a && . examples/demo.env && set +a && \
	  $(BIN)/stands-reconciler validate examples/stands-repo && \
	  $(BIN)/stands-reconciler render --out $(DEMO_OUT) examples/stands-repo

# The engine on the example: hcloudsim + the real Pulumi CLI; preview, apply, no-op apply, destroy.
demo-apply: build tools
	scripts/demo-apply.sh

clean: demo-down
	rm -rf $(BIN) $(DEMO_OUT) _demo _apply _out
