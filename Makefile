# virtlauncher — see README.md.
GO ?= go
export PATH := $(PATH):/usr/local/go/bin
export CGO_ENABLED := 0
# grpcnotrace leaves x/net/trace and text/template out of the binaries:
# the launcher shrinks from 38 to 28 MB and ~2 MiB of resident pages.
export GOFLAGS := -tags=grpcnotrace


.PHONY: all deps build test demo bench fuzz-long vet clean proto

all: build

deps:
	@./scripts/install-deps

build:
	@mkdir -p bin
	$(GO) build -o bin/ ./cmd/...

vet:
	gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$') | (! grep .)
	$(GO) vet ./...

# The README's test command: everything, against the real daemon and QEMU.
test: deps vet build
	$(GO) test -count=1 -timeout 25m ./...

# The README's main job: boot an example VM and show its console.
demo: deps build
	./bin/vlctl testguest --poweroff > bin/demo-vmi.yaml
	./bin/vlctl run --emulation bin/demo-vmi.yaml

proto:
	./api/generate.sh

bench: deps build
	$(GO) run ./bench

clean:
	rm -rf bin
