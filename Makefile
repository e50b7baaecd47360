# virtlauncher — see README.md.
GO ?= go
export PATH := $(PATH):/usr/local/go/bin
export CGO_ENABLED := 0
# grpcnotrace leaves x/net/trace and text/template out of the binaries:
# the launcher shrinks from 38 to 28 MB and ~2 MiB of resident pages.
export GOFLAGS := -tags=grpcnotrace


.PHONY: all deps build test demo bench fuzz-long vet clean proto image image-test

all: build

deps:
	@./scripts/install-deps

build:
	@mkdir -p bin
	$(GO) build -o bin/ ./cmd/...

vet:
	gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$') | (! grep .)
	$(GO) vet -tags=grpcnotrace,imagetest ./...

# The README's test command: everything, against the real daemon and QEMU,
# the launcher image included (the imagetest tag adds deploy/imagetest,
# which needs bin/virtlauncher-launcher.oci.tar).
test: deps vet build image
	$(GO) test -count=1 -timeout 25m -tags=grpcnotrace,imagetest ./...

# The README's main job: boot an example VM and show its console.
demo: deps build
	./bin/vlctl testguest --poweroff > bin/demo-vmi.yaml
	./bin/vlctl run --emulation bin/demo-vmi.yaml

proto:
	./api/generate.sh

bench: deps build
	$(GO) run ./bench

# The launcher image (deploy/README.md), built without a container engine:
# deploy/mkrootfs makes the Debian 12 root filesystem with mmdebstrap (as
# root; unshare mode otherwise), kept in bin/image/ until the script changes;
# deploy/mkimage adds the static binaries and writes the OCI image archive.
# SOURCE_DATE_EPOCH fixes every timestamp: the same tree and package versions
# give the same bytes.
SOURCE_DATE_EPOCH ?= 1735689600
IMAGE_NAME ?= docker.io/virtlauncher/virt-launcher:dev
IMAGE := bin/virtlauncher-launcher.oci.tar
IMAGE_BINS := virt-launcher virt-launcher-monitor container-disk virt-tail virt-probe virt-freezer

image: deps bin/image/rootfs.tar
	@mkdir -p bin/image/bin
	$(GO) build -trimpath -ldflags='-s -w' -o bin/image/bin/ $(addprefix ./cmd/,$(IMAGE_BINS))
	$(GO) run ./deploy/mkimage -rootfs bin/image/rootfs.tar -o $(IMAGE) -name $(IMAGE_NAME) \
		-epoch $(SOURCE_DATE_EPOCH) $(foreach b,$(IMAGE_BINS),-add /usr/bin/$(b)=bin/image/bin/$(b)) \
		-add /usr/bin/node-labeller.sh=deploy/node-labeller.sh \
		-cap /usr/bin/virt-launcher-monitor=net_bind_service
	@ls -l $(IMAGE)

bin/image/rootfs.tar: deploy/mkrootfs
	@mkdir -p bin/image
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) ./deploy/mkrootfs $@.tmp
	mv $@.tmp $@

# Boots the test guest from the image's root filesystem, in a root and a
# non-root pod, without a container engine (deploy/imagetest); `make test`
# runs it too. The build tag keeps it out of a plain `go test ./...`, which
# has no image to test.
image-test: image
	$(GO) test -count=1 -tags=imagetest,grpcnotrace -timeout 15m -v ./deploy/imagetest/

clean:
	rm -rf bin
