// Package conformance checks the KubeVirt drop-in contract of
// docs/kubevirt-wire.md from outside the launcher: the test plays
// virt-handler with nothing but the wire (the generated gRPC clients of
// api/cmdinfo and api/cmd/v1, a notify server of its own built on
// api/notifyinfo and api/notify/v1, and KubeVirt's Domain JSON shape from
// internal/domainjson/kvshape). It holds tests only; see conformance_test.go.
package conformance
