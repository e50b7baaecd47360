package standalone

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
	"github.com/virtlauncher/virtlauncher/internal/runctl"
	"github.com/virtlauncher/virtlauncher/internal/userstorage"
)

// A memory dump of a running `vlctl run` guest, what `virtctl memory-dump
// get` does in a cluster: `vlctl memory-dump NAME FILE` asks the run over
// its control socket, and the run plays virt-handler's part. It creates
// FILE (a new file, root's, 0600), gives QEMU's user write access to it
// (an ACL entry, as for a --volume) and links it into a memory dump
// volume's directory below the pod's hotplug-disks, where virt-handler
// mounts the memory dump PVC; then it calls VirtualMachineMemoryDump with
// that path and waits for the Domain's memory dump metadata to show the
// end. The link and the ACL entry go when it ends; a failed dump's file
// goes too.

// dumpVolume is the memory dump volume's name in the pod.
const dumpVolume = "memorydump"

// dumpRequestLimit bounds a memory-dump request: the dump itself (libvirt
// writes the guest's memory), and the run's clean-up after it.
const dumpRequestLimit = 30 * time.Minute

// dumpPoll is how often the run reads the Domain while a dump runs.
const dumpPoll = 200 * time.Millisecond

// DumpRequestLimit is how long vlctl memory-dump waits for the run's
// answer.
const DumpRequestLimit = dumpRequestLimit + time.Minute

// memoryDump writes the guest's memory to the new file req.File.
func (r *runner) memoryDump(ctx context.Context, client *cmdclient.Client, req runctl.MemoryDump) (_ string, err error) {
	if !filepath.IsAbs(req.File) {
		return "", fmt.Errorf("FILE %q: give an absolute path", req.File)
	}
	if _, err := os.Lstat(req.File); err == nil {
		return "", fmt.Errorf("FILE %s: exists; memory-dump writes a new file", req.File)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("FILE %s: %w", req.File, err)
	}
	status := func(format string, a ...any) { fmt.Fprintf(r.cfg.Status, format, a...) }
	// A 1-byte file: libvirt truncates it when it opens it.
	spec := userstorage.NewFileSpec(dumpVolume, "FILE", req.File, 1, "the memory dump")
	d, err := spec.Open(r.owner.User, func(string, ...any) {})
	if err != nil {
		return "", err
	}
	defer d.Release(status)
	if !d.Created() {
		return "", fmt.Errorf("FILE %s: exists; memory-dump writes a new file", req.File)
	}
	defer func() {
		if err != nil {
			d.RemoveCreated()
		}
	}()
	name := fmt.Sprintf("%s-%d.core", dumpVolume, time.Now().UnixNano())
	dumpPath := filepath.Join(r.layout.HotplugBlock(dumpVolume), name)
	unlink, err := r.linkDump(d.Real(), dumpPath)
	if err != nil {
		return "", err
	}
	defer unlink()
	t0 := time.Now()
	if err := client.MemoryDump(ctx, r.vmi, dumpPath); err != nil {
		return "", err
	}
	md, err := waitDumpEnd(ctx, client, name)
	if err != nil {
		return "", err
	}
	if md.Failed {
		return "", errors.New(md.FailureReason)
	}
	st, err := d.File().Stat()
	if err != nil {
		return "", err
	}
	msg := fmt.Sprintf("memory of %s/%s dumped to %s (%d bytes, an ELF core) in %v", r.vmi.Namespace, r.vmi.Name, req.File, st.Size(), time.Since(t0).Round(time.Millisecond))
	status("vlctl: %s\n", msg)
	return msg, nil
}

// linkDump makes the memory dump volume's directory and in it a link to
// the user's file at dumpPath, as root through the work dir's descriptor
// (hotplug-disks is the launcher user's). unlink removes both.
func (r *runner) linkDump(real, dumpPath string) (unlink func(), err error) {
	dir, err := r.rel(filepath.Dir(dumpPath))
	if err != nil {
		return nil, err
	}
	link := filepath.Join(dir, filepath.Base(dumpPath))
	if err := r.dir.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("memory dump volume: %w", err)
	}
	if err := r.dir.Symlink(real, link); err != nil {
		r.dir.Remove(dir)
		return nil, fmt.Errorf("memory dump volume: %w", err)
	}
	return func() {
		for _, p := range []string{link, dir} {
			if err := r.dir.Remove(p); err != nil {
				fmt.Fprintf(r.cfg.Status, "vlctl: memory dump volume: %v\n", err)
			}
		}
	}, nil
}

// waitDumpEnd reads the Domain, as virt-handler does, until the dump to
// file has ended.
func waitDumpEnd(ctx context.Context, client *cmdclient.Client, file string) (*domainjson.MemoryDumpMetadata, error) {
	for {
		d, exists, err := client.GetDomain(ctx)
		if err == nil && !exists {
			return nil, errors.New("the VM is gone")
		}
		if err == nil {
			md := d.Spec.Metadata.KubeVirt.MemoryDump
			switch {
			case md == nil || md.FileName != file:
				// The launcher records a dump it starts before it
				// answers: it started none, as one still runs.
				return nil, errors.New("another memory dump is in progress; try again when it has ended")
			case md.EndTimestamp != nil:
				return md, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the memory dump did not end in time: %w", ctx.Err())
		case <-time.After(dumpPoll):
		}
	}
}
