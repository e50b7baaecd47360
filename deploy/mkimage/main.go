// Command mkimage packs the launcher image without a container engine: the
// Debian root filesystem made by deploy/mkrootfs becomes the first layer,
// our static binaries the second, and the result is written as an OCI image
// archive (an OCI image layout in a tar: `ctr images import`, `podman load`,
// `skopeo copy oci-archive:...`).
//
// Everything in the output is a function of the inputs: entries are sorted,
// every mtime is SOURCE_DATE_EPOCH, owner names are dropped (numeric ids
// stay), and the archive's own entries are fixed too.
//
//	mkimage -rootfs rootfs.tar -epoch N -name REF -o out.oci.tar \
//	    -add /usr/bin/virt-launcher=bin/image/virt-launcher ... \
//	    -cap /usr/bin/virt-launcher-monitor=net_bind_service
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/ociimage"
)

// multi is a repeatable DST=SRC flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	var adds, caps multi
	rootfs := flag.String("rootfs", "", "the root filesystem tarball (deploy/mkrootfs)")
	out := flag.String("o", "", "the OCI image archive to write")
	name := flag.String("name", "", "the image reference recorded in the archive (e.g. docker.io/virtlauncher/virt-launcher:dev)")
	epoch := flag.String("epoch", os.Getenv("SOURCE_DATE_EPOCH"), "SOURCE_DATE_EPOCH: every timestamp in the image")
	flag.Var(&adds, "add", "DST=SRC: a file of the second layer (repeatable; mode 0755, owner root)")
	flag.Var(&caps, "cap", "DST=CAP[,CAP]: file capabilities (permitted+effective) on DST in the second layer (repeatable)")
	flag.Parse()
	if err := run(*rootfs, *out, *name, *epoch, adds, caps); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(rootfs, out, name, epoch string, adds, caps []string) error {
	if rootfs == "" || out == "" || name == "" {
		return fmt.Errorf("-rootfs, -o and -name are required")
	}
	sec, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil || sec < 0 {
		return fmt.Errorf("-epoch / SOURCE_DATE_EPOCH %q: want seconds since 1970", epoch)
	}
	epochT := time.Unix(sec, 0).UTC()
	// The image config as KubeVirt's launcher image has it
	// (cmd/virt-launcher/BUILD.bazel: entrypoint /usr/bin/virt-launcher, no
	// user: root). VMI pods set the command (/usr/bin/virt-launcher-monitor)
	// and the user (0 or 107) themselves; virt-handler's node-labeller init
	// container sets neither, and runs node-labeller.sh as the image's user,
	// which must be root to start a libvirt daemon.
	spec := ociimage.Spec{
		Rootfs:   rootfs,
		Epoch:    epochT,
		Config:   ociimage.Config{Entrypoint: []string{"/usr/bin/virt-launcher"}},
		RootfsBy: "deploy/mkrootfs: Debian 12 (mmdebstrap)",
		FilesBy:  "deploy/mkimage: the virtlauncher binaries",
	}
	for _, a := range adds {
		dst, src, ok := strings.Cut(a, "=")
		if !ok || !strings.HasPrefix(dst, "/") || src == "" {
			return fmt.Errorf("-add %q: want /DST=SRC", a)
		}
		spec.Files = append(spec.Files, ociimage.File{Dst: dst, Src: src})
	}
	for _, c := range caps {
		dst, list, ok := strings.Cut(c, "=")
		if !ok || list == "" {
			return fmt.Errorf("-cap %q: want /DST=CAP[,CAP]", c)
		}
		found := false
		for i := range spec.Files {
			if spec.Files[i].Dst == dst {
				spec.Files[i].Caps = strings.Split(list, ",")
				found = true
			}
		}
		if !found {
			return fmt.Errorf("-cap %q: %s is not a file given with -add", c, dst)
		}
	}
	if err := ociimage.CheckName(name); err != nil {
		return fmt.Errorf("-name: %w", err)
	}
	work, err := os.MkdirTemp(filepath.Dir(out), ".mkimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	img, err := ociimage.Image(spec, work)
	if err != nil {
		return err
	}
	return ociimage.WriteArchive(img, name, epochT, out)
}
