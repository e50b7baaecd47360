//go:build tools

// Package virtlauncher pins the modules that the packages are being built on,
// so that parallel work on separate packages never races on go.mod.
package virtlauncher

import (
	_ "github.com/digitalocean/go-libvirt"
	_ "github.com/diskfs/go-diskfs"
	_ "github.com/diskfs/go-diskfs/filesystem/iso9660"
	_ "github.com/google/nftables"
	_ "github.com/google/uuid"
	_ "github.com/insomniacslk/dhcp/dhcpv4/server4"
	_ "github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	_ "github.com/insomniacslk/dhcp/dhcpv6/server6"
	_ "github.com/spf13/cobra"
	_ "github.com/vishvananda/netlink"
	_ "github.com/vishvananda/netns"
	_ "google.golang.org/grpc"
	_ "google.golang.org/protobuf/proto"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apimachinery/pkg/api/resource"
	_ "kubevirt.io/api/core/v1"
	_ "libvirt.org/go/libvirtxml"
	_ "sigs.k8s.io/yaml"
)
