package suite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/ociimage"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// standInGuests are the containerDisk images KubeVirt's functional suite
// boots its VMIs from (tests/containerdisk, standInGuestRepo) that the e2e
// cluster stands in for: their real images cannot be pulled here.
// Each boots from a BIOS disk with the login of the image it stands in
// for; only the ones with test tooling run the guest agent, as the real
// images do; Fedora's agent shuts its guest down (guest-shutdown), as
// systemd does in the real image.
var standInGuests = []struct {
	name string
	opts []string
}{
	{testguest.LoginAlpine, []string{testguest.OptLogin(testguest.LoginAlpine), testguest.OptNoAgent}},
	{testguest.LoginCirros, []string{testguest.OptLogin(testguest.LoginCirros), testguest.OptNoAgent}},
	{testguest.LoginAlpineTestTooling, []string{testguest.OptLogin(testguest.LoginAlpineTestTooling)}},
	{testguest.LoginFedoraTestTooling, []string{testguest.OptLogin(testguest.LoginFedoraTestTooling), testguest.OptAgentShutdown, testguest.OptTooling}},
}

// PushStandInGuests pushes, under the names KubeVirt's functional suite
// gives its guests' containerDisks (prefix <registry>/kubevirt, tag
// KubeVirtVersion), a disk the VMI's BIOS boots: the test guest on
// testguest.BIOSDisk with the login of the image it stands in for
// (testguest.OptLogin: the issue line, "<host> login: ", the user and
// password, the image's prompts) and, as those images, a guest agent only
// in alpine-with-test-tooling and fedora-with-test-tooling. It is a test
// fixture, not alpine, cirros or Fedora: no package manager, busybox's
// tools only, and whatever a spec runs beyond the login and the commands
// the login helpers run may answer differently (e2e/README.md).
func (e *Env) PushStandInGuests(ctx context.Context) error {
	g, err := testguest.Build(ctx, testguest.DefaultCacheDir())
	if err != nil {
		return fmt.Errorf("build the test guest: %w", err)
	}
	work, err := os.MkdirTemp("", "vl-e2e-standin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	for _, sg := range standInGuests {
		name := sg.name
		qcow := filepath.Join(work, name+".qcow2")
		if err := g.BIOSDisk(ctx, qcow, sg.opts...); err != nil {
			return fmt.Errorf("stand-in %s: %w", name, err)
		}
		spec := ociimage.Spec{
			Files:   []ociimage.File{{Dst: "/disk/disk.qcow2", Src: qcow, Mode: 0o440, UID: 107, GID: 107}},
			Epoch:   time.Unix(0, 0).UTC(),
			FilesBy: "e2e/suite: the test guest's BIOS disk standing in for KubeVirt's " + name + " containerDisk",
		}
		if err := e.Cluster.Images().Push(ctx, spec, e.StandInGuestImage(name)); err != nil {
			return err
		}
	}
	return nil
}

// StandInGuestImage is the reference KubeVirt's functional suite gives
// guest name's containerDisk in this cluster.
func (e *Env) StandInGuestImage(name string) string {
	return e.kubevirtImage(standInGuestRepo(name))
}

// standInGuestRepo is the repository KubeVirt's suite names guest name's
// containerDisk by (tests/containerdisk.ContainerDiskFromRegistryFor): the
// demo images are <name>-container-disk-demo, the ones with test tooling
// <name>-container-disk.
func standInGuestRepo(name string) string {
	switch name {
	case testguest.LoginAlpineTestTooling, testguest.LoginFedoraTestTooling:
		return name + "-container-disk"
	}
	return name + "-container-disk-demo"
}

// VMKillerRootfs is the root filesystem of the vm-killer stand-in, in the
// module's tree: `make e2e-functest` builds it with
// `deploy/mkrootfs --flavour=vm-killer`.
const VMKillerRootfs = "bin/image/vm-killer-rootfs.tar"

// PushStandInVMKiller pushes the stand-in for KubeVirt's vm-killer utility
// image under the name KubeVirt's functional suite gives it
// (libregistry.GetUtilityImageFromRegistry: <prefix>/vm-killer:<tag>; the
// suite's utility prefix and tag default to -container-prefix and
// -container-tag). The suite's helper pods and Jobs run on it (tests/libpod,
// tests/libnet/job): bash, nmap's ncat as nc, curl, ping, procps. It is a
// test fixture: Debian 12 packages in place of KubeVirt's CentOS Stream 9
// ones, without qemu-img, targetcli or sevctl (e2e/README.md).
func (e *Env) PushStandInVMKiller(ctx context.Context) error {
	rootfs := filepath.Join(e.Root, VMKillerRootfs)
	if _, err := os.Stat(rootfs); err != nil {
		return fmt.Errorf("the vm-killer stand-in: %w (make e2e-functest builds it)", err)
	}
	return e.Cluster.Images().Push(ctx, vmKillerSpec(rootfs), e.StandInVMKillerImage())
}

// vmKillerSpec is the vm-killer stand-in image made of rootfs: that tree and
// KubeVirt's image's config, user 1001 and no entry point (images/vm-killer:
// the suite's pods say runAsNonRoot without a user, and give their command).
func vmKillerSpec(rootfs string) ociimage.Spec {
	return ociimage.Spec{
		Rootfs:   rootfs,
		Epoch:    time.Unix(0, 0).UTC(),
		Config:   ociimage.Config{User: "1001"},
		RootfsBy: "deploy/mkrootfs --flavour=vm-killer: Debian 12 (mmdebstrap)",
		FilesBy:  "e2e/suite: the stand-in for KubeVirt's vm-killer utility image (no files of its own)",
	}
}

// StandInVMKillerImage is the reference KubeVirt's functional suite gives
// its vm-killer utility image in this cluster.
func (e *Env) StandInVMKillerImage() string {
	return e.kubevirtImage("vm-killer")
}
