# virtlauncher — see README.md.
GO ?= go
export PATH := $(PATH):/usr/local/go/bin
export CGO_ENABLED := 0
# grpcnotrace leaves x/net/trace and text/template out of the binaries:
# the launcher shrinks from 38 to 28 MB and ~2 MiB of resident pages.
export GOFLAGS := -tags=grpcnotrace


.PHONY: all deps build test demo bench fuzz-long vet clean proto image image-test test-migration-stress test-hugepages test-kubevirt-compare

all: build

deps:
	@./scripts/install-deps

build:
	@mkdir -p bin
	$(GO) build -o bin/ ./cmd/...

# The linters, at exact versions: `go run pkg@version` fetches and builds
# them from the Go module proxy, so CI needs nothing installed (staticcheck
# v0.8.2 is release 2026.2.2, which runs on Go 1.26). Both see the e2e and
# imagetest code, so code only those use is neither unchecked nor reported
# dead; deadcode's -test counts what tests use as live. deadcode exits 0
# whatever it finds, so its output is the verdict, and its own failure
# must not pass as "no output".
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
DEADCODE := golang.org/x/tools/cmd/deadcode@v0.52.0
LINT_TAGS := grpcnotrace,imagetest,e2e,migrationstress,hugepages,kubevirtcompare

vet:
	gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$') | (! grep .)
	$(GO) vet -tags=grpcnotrace,imagetest,migrationstress,hugepages,kubevirtcompare ./...
	$(GO) run $(STATICCHECK) -tags=$(LINT_TAGS) ./...
	@out=$$($(GO) run $(DEADCODE) -test -tags=$(LINT_TAGS) ./...) || exit 1; \
	if [ -n "$$out" ]; then echo "$$out"; echo "deadcode: unreachable functions (remove them)"; exit 1; fi

# The README's test command: everything, against the real daemon and QEMU,
# the launcher image included (the imagetest tag adds deploy/imagetest,
# which needs bin/virtlauncher-launcher.oci.tar).
test: deps vet build image
	$(GO) test -count=1 -timeout 25m -tags=grpcnotrace,imagetest ./...

# The live migrations of a guest that rewrites its memory (the
# workload-disruption pause, auto-converge, post-copy, post-copy refused), kept
# out of make test: with QEMU < 9.0 under TCG a migration can lose the guest's
# last memory writes when the machine is busy (a QEMU bug; docs/migration.md §8),
# and their guest once crashed so. TestMigrationMemoryIntegrity finds such lost
# pages directly: it failed in 1 of 5 runs beside `go test ./internal/...` here.
# Post-copy needs vm.unprivileged_userfaultfd=1 (QEMU 7.2 runs unprivileged in
# our pods), the refusal needs 0: VIRTLAUNCHER_TEST_SET_USERFAULTFD=1 lets each
# of the two tests set the machine's sysctl for its run and put it back after.
# Measured 2m08s here (2026-12-06, the five tests).
test-migration-stress: deps build
	VIRTLAUNCHER_TEST_SET_USERFAULTFD=1 $(GO) test -count=1 -timeout 15m -tags=grpcnotrace,imagetest,migrationstress -v -run '^TestMigration(Paused|AutoConverge|PostCopy|PostCopyUnavailable|MemoryIntegrity)$$' ./test/integration/

# A guest backed by 2Mi hugepages (memory.hugepages), kept out of make test:
# it needs the machine's hugepage pool, whole-machine state that is empty on a
# stock machine. VIRTLAUNCHER_TEST_SET_HUGEPAGES=1 lets TestHugepages raise
# vm.nr_hugepages by the guest's pages for its run and put it back after; it
# checks the refusal naming the page size first, then HugePages_Free and
# QEMU's 2 MiB-page mappings. Measured 10.5 s here (2026-12-07).
test-hugepages: deps build
	VIRTLAUNCHER_TEST_SET_HUGEPAGES=1 $(GO) test -count=1 -timeout 10m -tags=grpcnotrace,hugepages -v -run '^TestHugepages$$' ./test/integration/

# KubeVirt's own host device code (v1.8.2's, from the e2e build module) run
# on the table of device-plugin environments that our converter is checked
# against (internal/converter/hostdev TestAgainstKubeVirt), kept out of make
# test: it is a cgo build of KubeVirt's converter against Debian's
# libvirt-dev, which install-bench-deps adds, and takes minutes cold.
test-kubevirt-compare: deps
	@./scripts/install-bench-deps
	$(GO) test -count=1 -timeout 30m -tags=grpcnotrace,kubevirtcompare -v -run '^TestAgainstKubeVirt$$' ./internal/converter/hostdev/

# The README's main job: boot an example VM and show its console.
demo: deps build
	./bin/vlctl testguest --poweroff > bin/demo-vmi.yaml
	./bin/vlctl run --emulation bin/demo-vmi.yaml

proto:
	./api/generate.sh

# The bench (bench/README.md). It builds KubeVirt's own launcher too and runs
# it beside ours (the "pair" part); BENCH_KUBEVIRT=false skips both where
# KubeVirt's launcher cannot be built. BENCH_FLAGS go to the bench (-quick,
# -only ...).
BENCH_KUBEVIRT ?= true
bench: deps build image $(if $(filter true,$(BENCH_KUBEVIRT)),kubevirt-launcher)
	$(GO) run ./bench -kubevirt=$(BENCH_KUBEVIRT) $(BENCH_FLAGS)

# The launcher image (deploy/README.md), built without a container engine:
# deploy/mkrootfs makes the Debian 12 root filesystem with mmdebstrap (as
# root; unshare mode otherwise), kept in bin/image/ until the script changes;
# deploy/mkimage adds the static binaries and writes the OCI image archive.
# SOURCE_DATE_EPOCH fixes every timestamp: the same tree and package versions
# give the same bytes.
SOURCE_DATE_EPOCH ?= 1735689600
IMAGE_NAME ?= docker.io/virtlauncher/virt-launcher:dev
IMAGE := bin/virtlauncher-launcher.oci.tar
IMAGE_BINS := virt-launcher virt-launcher-monitor container-disk virt-tail virt-probe virt-freezer libvirt-hook-client
# /usr/libexec/virtiofsd: what virt-controller runs in a VMI's virtiofs
# containers (cmd/virtiofsd, over Debian's QEMU 7.2 virtiofsd).
IMAGE_LIBEXEC := virtiofsd

image: deps bin/image/rootfs.tar
	@mkdir -p bin/image/bin
	$(GO) build -trimpath -ldflags='-s -w' -o bin/image/bin/ $(addprefix ./cmd/,$(IMAGE_BINS) $(IMAGE_LIBEXEC))
	$(GO) run ./deploy/mkimage -rootfs bin/image/rootfs.tar -o $(IMAGE) -name $(IMAGE_NAME) \
		-epoch $(SOURCE_DATE_EPOCH) $(foreach b,$(IMAGE_BINS),-add /usr/bin/$(b)=bin/image/bin/$(b)) \
		$(foreach b,$(IMAGE_LIBEXEC),-add /usr/libexec/$(b)=bin/image/bin/$(b)) \
		-add /usr/bin/node-labeller.sh=deploy/node-labeller.sh \
		-add /etc/libvirt/hooks/qemu=bin/image/bin/libvirt-hook-client \
		-cap /usr/bin/virt-launcher-monitor=net_bind_service
	@ls -l $(IMAGE)

bin/image/rootfs.tar: deploy/mkrootfs
	@mkdir -p bin/image
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) ./deploy/mkrootfs $@.tmp
	mv $@.tmp $@

# The e2e functional suite's stand-in for KubeVirt's vm-killer utility image
# (e2e/README.md): a small Debian root filesystem (bash, ncat, curl, ping,
# procps) that e2e/suite pushes. Measured: 41 s to 1m51s (mmdebstrap).
bin/image/vm-killer-rootfs.tar: deploy/mkrootfs
	@mkdir -p bin/image
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) ./deploy/mkrootfs --flavour=vm-killer $@.tmp
	mv $@.tmp $@

# Boots the test guest from the image's root filesystem, in a root and a
# non-root pod, without a container engine (deploy/imagetest); `make test`
# runs it too. The build tag keeps it out of a plain `go test ./...`, which
# has no image to test.
image-test: image
	$(GO) test -count=1 -tags=imagetest,grpcnotrace -timeout 15m -v ./deploy/imagetest/

clean:
	rm -rf bin

# The e2e cluster (e2e/README.md): Kubernetes, etcd, containerd and
# KubeVirt built from their Go modules at the exact versions the go.mod
# files under e2e/build pin, into bin/e2e. Go's build cache makes a second
# run relink nothing that did not change.
E2E_BIN := $(CURDIR)/bin/e2e
K8S_VERSION := v1.34.3
K8S_LDFLAGS := -s -w $(foreach p,k8s.io/component-base/version k8s.io/client-go/pkg/version,\
	-X $(p).gitVersion=$(K8S_VERSION) -X $(p).gitMajor=1 -X $(p).gitMinor=34 -X $(p).gitTreeState=clean)
CONTAINERD_VERSION := v2.2.9
KUBEVIRT_VERSION := v1.8.2
# The e2e cluster's image registry (e2e/cluster: on loopback, in the test process).
E2E_REGISTRY := localhost:15000
# Absent from the checksum database (e2e/build/kubevirt/go.mod); go.sum pins them.
KUBEVIRT_NOSUMDB := kubevirt.io/virt-template*,github.com/rhobs/operator-observability-toolkit
KUBEVIRT_LDFLAGS := -s -w -X kubevirt.io/client-go/version.gitVersion=$(KUBEVIRT_VERSION) -X kubevirt.io/client-go/version.gitTreeState=clean

# KubeVirt's own virt-launcher and virt-launcher-monitor at KUBEVIRT_VERSION,
# for the side-by-side bench (bench/README.md): cgo against Debian's
# libvirt-dev, from the e2e build module (its go.mod says why libnbd is a
# stand-in). Measured: about 1 minute once the e2e build has filled the
# module and build caches.
KUBEVIRT_LAUNCHER_BIN := $(CURDIR)/bin/kubevirt
# What KubeVirt's launcher image has and ours does not: xorriso (its launcher
# writes cloud-init and config ISOs with xorrisofs; ours writes them itself).
# The bench unpacks these into the pods of KubeVirt's launcher.
KUBEVIRT_IMAGE_DEBS := xorriso libisoburn1 libburn4 libisofs6 libjte2
.PHONY: kubevirt-launcher
kubevirt-launcher: deps
	@./scripts/install-bench-deps
	@mkdir -p $(KUBEVIRT_LAUNCHER_BIN)
	cd e2e/build/kubevirt && GONOSUMDB='$(KUBEVIRT_NOSUMDB)' CGO_ENABLED=1 $(GO) build -trimpath -ldflags '$(KUBEVIRT_LDFLAGS)' -o $(KUBEVIRT_LAUNCHER_BIN)/ \
		kubevirt.io/kubevirt/cmd/virt-launcher kubevirt.io/kubevirt/cmd/virt-launcher-monitor
	$(KUBEVIRT_LAUNCHER_BIN)/virt-launcher --help 2>&1 | grep -q -- --container-disk-dir
	@mkdir -p $(KUBEVIRT_LAUNCHER_BIN)/debs
	cd $(KUBEVIRT_LAUNCHER_BIN)/debs && apt-get download -q $(KUBEVIRT_IMAGE_DEBS) 2>&1 | grep -v '^W: Download is performed unsandboxed' || true
	@for p in $(KUBEVIRT_IMAGE_DEBS); do ls $(KUBEVIRT_LAUNCHER_BIN)/debs/$${p}_*.deb >/dev/null || exit 1; done

.PHONY: e2e-deps e2e-build e2e
e2e-deps: deps
	@./scripts/install-e2e-deps

e2e-build: e2e-deps
	@mkdir -p $(E2E_BIN)
	cd e2e/build/k8s && $(GO) build -trimpath -ldflags '$(K8S_LDFLAGS)' -o $(E2E_BIN)/ \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet \
		k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl
	cd e2e/build/k8s && $(GO) build -trimpath -ldflags '-s -w' -o $(E2E_BIN)/etcd go.etcd.io/etcd/server/v3
	cd e2e/build/containerd && $(GO) build -trimpath -tags no_btrfs,no_devmapper,no_zfs \
		-ldflags '-s -w -X github.com/containerd/containerd/v2/version.Version=$(CONTAINERD_VERSION)' -o $(E2E_BIN)/ \
		github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
		github.com/containerd/containerd/v2/cmd/ctr
	cd e2e/build/kubevirt && GONOSUMDB='$(KUBEVIRT_NOSUMDB)' $(GO) build -trimpath -ldflags '$(KUBEVIRT_LDFLAGS)' -o $(E2E_BIN)/ \
		kubevirt.io/kubevirt/cmd/virt-operator kubevirt.io/kubevirt/cmd/virt-api \
		kubevirt.io/kubevirt/cmd/virt-controller kubevirt.io/kubevirt/cmd/virtctl kubevirt.io/kubevirt/cmd/virt-chroot \
		kubevirt.io/kubevirt/tools/manifest-templator
	# KubeVirt's hook sidecar shim and its smbios example hook (cmd/sidecars).
	cd e2e/build/kubevirt && GONOSUMDB='$(KUBEVIRT_NOSUMDB)' $(GO) build -trimpath -ldflags '$(KUBEVIRT_LDFLAGS)' -o $(E2E_BIN)/sidecar-shim kubevirt.io/kubevirt/cmd/sidecars
	cd e2e/build/kubevirt && GONOSUMDB='$(KUBEVIRT_NOSUMDB)' $(GO) build -trimpath -ldflags '$(KUBEVIRT_LDFLAGS)' -o $(E2E_BIN)/onDefineDomain kubevirt.io/kubevirt/cmd/sidecars/smbios
	# virt-handler's node labeller reads KVM's capabilities through cgo.
	cd e2e/build/kubevirt && GONOSUMDB='$(KUBEVIRT_NOSUMDB)' CGO_ENABLED=1 $(GO) build -trimpath -ldflags '$(KUBEVIRT_LDFLAGS)' -o $(E2E_BIN)/ \
		kubevirt.io/kubevirt/cmd/virt-handler
	$(GO) build -trimpath -ldflags '-s -w' -o $(E2E_BIN)/pause ./e2e/pause
	# KubeVirt's install manifest, rendered by its own templator as its
	# release does (hack/build-manifests.sh), for images in our registry.
	cd e2e/build/kubevirt && KV=$$(GONOSUMDB='$(KUBEVIRT_NOSUMDB)' $(GO) list -m -f '{{.Dir}}' kubevirt.io/kubevirt) && \
	$(E2E_BIN)/manifest-templator --process-files --generated-manifests-dir=$$KV/manifests/generated/ \
		--input-file=$$KV/manifests/release/kubevirt-operator.yaml.in > $(E2E_BIN)/kubevirt-operator.yaml.in && \
	$(E2E_BIN)/manifest-templator --process-vars --namespace=kubevirt --container-prefix=$(E2E_REGISTRY)/kubevirt \
		--container-tag=$(KUBEVIRT_VERSION) --image-pull-policy=IfNotPresent --verbosity=2 \
		--kubevirt-logo-path=$$KV/assets/kubevirt_logo.png \
		--input-file=$(E2E_BIN)/kubevirt-operator.yaml.in > $(E2E_BIN)/kubevirt-operator.yaml.tmp && \
	mv $(E2E_BIN)/kubevirt-operator.yaml.tmp $(E2E_BIN)/kubevirt-operator.yaml && rm $(E2E_BIN)/kubevirt-operator.yaml.in

# The e2e suite (e2e/README.md): brings the cluster up, installs KubeVirt
# with our launcher image, runs the scenarios, takes it all down. Measured
# 11m37s here (2026-12-06, two nodes, thirteen scenarios; e2e-build warm).
e2e: e2e-build image
	$(GO) test -count=1 -timeout 60m -tags=grpcnotrace,e2e -v -skip '^TestLaunchersSideBySide$$' ./e2e/

# KubeVirt's own functional test suite (kubevirt.io/kubevirt/tests at
# KUBEVIRT_VERSION) as a test binary, from the e2e build module (e2e/README.md,
# "KubeVirt's functional suite"). GOFLAGS is emptied: the suite is built as
# KubeVirt builds it, without our grpcnotrace tag. Measured: 11 min cold on
# the loaded 2-core machine.
FUNCTEST_BIN := $(E2E_BIN)/functest.test
.PHONY: e2e-functest-build
e2e-functest-build:
	@mkdir -p $(E2E_BIN)
	cd e2e/build/kubevirt && GOFLAGS= GONOSUMDB='$(KUBEVIRT_NOSUMDB)' $(GO) test -c -ldflags '$(KUBEVIRT_LDFLAGS)' -o $(FUNCTEST_BIN) kubevirt.io/kubevirt/tests
	cd $(E2E_BIN) && $(FUNCTEST_BIN) --ginkgo.dry-run --ginkgo.label-filter=conformance -junit-output=/dev/null >/dev/null

# KubeVirt's functional suite against the e2e cluster (e2e/README.md): the
# cluster up, the suite's SELECTION (e2e/functest/selections.json) run on our
# launcher image and then on KubeVirt's own, the cluster down, and the two
# JUnit reports compared (bin/e2e/functest-results). LABEL and FOCUS replace
# the selection's filter for an ad hoc run; SHARD=I/N runs every N-th spec;
# LAUNCHERS=ours runs only ours. The vm-killer stand-in's own test
# (TestVMKillerStandIn, about 2 minutes) runs first: a broken fixture would
# fail specs on both launchers for an hour.
SELECTION ?= conformance-nologin
.PHONY: e2e-functest
e2e-functest: e2e-build image kubevirt-launcher e2e-functest-build bin/image/vm-killer-rootfs.tar
	$(GO) test -count=1 -timeout 10m -tags=grpcnotrace,e2e -run '^TestVMKillerStandIn$$' ./e2e/suite/
	$(GO) run ./e2e/cmd/e2e-functest run -selection '$(SELECTION)' $(if $(LABEL),-label '$(LABEL)') \
		$(if $(FOCUS),-focus '$(FOCUS)') $(if $(SHARD),-shard '$(SHARD)') $(if $(LAUNCHERS),-launchers '$(LAUNCHERS)')

# kubectl's view of both launcher images in the same cluster (e2e/README.md):
# create -> Running -> Ready and delete -> pod gone, ours and KubeVirt's own
# launcher alternating; the samples go to bench/e2e-results.json.
.PHONY: e2e-bench
e2e-bench: e2e-build image kubevirt-launcher
	E2E_BENCH_OUT=$(CURDIR)/bench/e2e-results.json $(GO) test -count=1 -timeout 60m -tags=grpcnotrace,e2e -v -run '^TestLaunchersSideBySide$$' ./e2e/
