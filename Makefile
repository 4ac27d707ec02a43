# stands-reconciler — build, test and lint. `make demo` runs the main job on the example repository;
# `make test` is what CI runs (.ci/run).
GO           ?= go
BIN          := bin
STATICCHECK  := honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME     ?= 20s
VERSION      ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
LDFLAGS      := -X main.version=$(VERSION)
DEMO_OUT     ?= _render

.PHONY: all build test unit fuzz lint demo clean

all: lint test build

build: $(BIN)/stands-reconciler

# Always rebuilt: go's own cache makes this cheap and keeps -X version honest.
.PHONY: $(BIN)/stands-reconciler
$(BIN)/stands-reconciler:
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $@ ./cmd/stands-reconciler

# The test command (README, .ci/run): a short fuzz of the manifest parser, then every test with -race.
test: fuzz unit

unit:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzPreflight$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./engine/manifest

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

# The main job on the embedded default: validate the example stands repository and render every stand
# (with reserved test addresses) into $(DEMO_OUT)/. The example's secrets come from examples/demo.env.
demo: build
	set -a && . examples/demo.env && set +a && \
	  $(BIN)/stands-reconciler validate examples/stands-repo && \
	  $(BIN)/stands-reconciler render --out $(DEMO_OUT) examples/stands-repo

clean:
	rm -rf $(BIN) $(DEMO_OUT)
