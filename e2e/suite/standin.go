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
// boots its VMIs from (tests/containerdisk: <prefix>/<name>-container-disk-demo:<tag>)
// that the e2e cluster stands in for: their real images cannot be pulled here.
// Each boots from a BIOS disk with the login of the image it stands in
// for; only the one with test tooling runs the guest agent, as the real
// images do.
var standInGuests = []struct {
	name string
	opts []string
}{
	{testguest.LoginAlpine, []string{testguest.OptLogin(testguest.LoginAlpine), testguest.OptNoAgent}},
	{testguest.LoginCirros, []string{testguest.OptLogin(testguest.LoginCirros), testguest.OptNoAgent}},
	{testguest.LoginAlpineTestTooling, []string{testguest.OptLogin(testguest.LoginAlpineTestTooling)}},
}

// PushStandInGuests pushes, under the names KubeVirt's functional suite
// gives its guests' containerDisks (prefix <registry>/kubevirt, tag
// KubeVirtVersion), a disk the VMI's BIOS boots: the test guest on
// testguest.BIOSDisk with the login of the image it stands in for
// (testguest.OptLogin: the issue line, "<host> login: ", the user and
// password, a root prompt) and, as those images, a guest agent only in
// alpine-with-test-tooling. It is a
// test fixture, not alpine or cirros: no package manager, busybox's tools
// only, and whatever a spec runs beyond the login and the commands the
// login helpers run may answer differently (e2e/README.md).
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
	return e.kubevirtImage(name + "-container-disk-demo")
}
