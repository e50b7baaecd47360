package disks

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/storage"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// Changed block tracking (CBT) puts a qcow2 overlay in front of each
// tracked volume's raw image, as KubeVirt's launcher does: the overlay
// holds no data of its own (its external data file is the raw image,
// data-file-raw on, so the image stays a complete raw disk) but keeps the
// persistent dirty bitmaps libvirt's checkpoints and incremental backups
// need. The overlay lives in layout.CBTDir, which virt-controller backs
// with the VM's backend-storage volume, so an existing overlay is kept:
// its bitmaps are what the next incremental backup starts from.

// cbtCreateWait bounds the making of one overlay (KubeVirt's 30 s).
const cbtCreateWait = 30 * time.Second

// cbtOverlay makes the overlay of a tracked file volume unless it is there.
// An overlay that is there but names another data file (the pod's
// directories moved, as between standalone runs) is pointed at this one.
// fresh reports that this call made the file.
func (p *Preparer) cbtOverlay(ctx context.Context, v *v1.VirtualMachineInstance, vol *v1.Volume) (file string, fresh bool, err error) {
	if !vmi.CBTEnabled(v) || !vmi.CBTVolume(vol) || vmi.CBTHotplugged(vol) {
		return "", false, nil
	}
	data, err := storage.CBTDataFile(p.Layout, vol)
	if err != nil {
		return "", false, err
	}
	final := p.Layout.CBTOverlay(vol.Name, p.Root)
	fi, err := os.Stat(data)
	if err != nil {
		return "", false, fmt.Errorf("changed block tracking: the volume's image: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", false, fmt.Errorf("changed block tracking: %s is not a regular file (block volumes are not tracked)", data)
	}
	ok, err := exists(final)
	if err != nil {
		return "", false, err
	}
	if ok {
		return final, false, p.cbtKeep(ctx, final, data)
	}
	err = p.createAtomic(final, imageMode, func(tmp *os.File) error {
		cctx, cancel := context.WithTimeout(ctx, cbtCreateWait)
		defer cancel()
		return createDataFileOverlay(cctx, tmp.Name(), data, fi.Size())
	})
	if err != nil {
		return "", false, fmt.Errorf("changed block tracking overlay %s: %w", final, err)
	}
	p.log().Info("created changed block tracking overlay", "path", final, "dataFile", data, "size", fi.Size())
	return final, true, nil
}

// cbtKeep checks a kept overlay's data file and points it at data when it
// names another (qemu-img amend rewrites the header only; bitmaps stay).
func (p *Preparer) cbtKeep(ctx context.Context, overlay, data string) error {
	cctx, cancel := context.WithTimeout(ctx, cbtCreateWait)
	defer cancel()
	info, err := p.qemuImgInfo(cctx, overlay)
	if err != nil {
		return fmt.Errorf("changed block tracking overlay: %w", err)
	}
	if info.Format != "qcow2" {
		return fmt.Errorf("changed block tracking overlay %s: format %q, not qcow2", overlay, info.Format)
	}
	if info.FormatSpecific.Data.DataFile == data {
		p.log().Debug("keeping changed block tracking overlay", "path", overlay)
		return nil
	}
	if err := p.runQemuImg(cctx, "amend", "-f", "qcow2", "-o", "data_file="+data, overlay); err != nil {
		return fmt.Errorf("changed block tracking overlay %s: point it at %s: %w", overlay, data, err)
	}
	p.log().Info("changed block tracking overlay pointed at the volume's image", "path", overlay, "was", info.FormatSpecific.Data.DataFile, "dataFile", data)
	return nil
}

// createDataFileOverlay makes, in the existing empty file overlay, a qcow2
// image of size bytes whose data file is the existing raw image data.
// qemu-img create would make the data file anew (truncating the guest's
// disk); qemu-storage-daemon's blockdev-create formats over nodes opened
// on both files and leaves the data as it is.
func createDataFileOverlay(ctx context.Context, overlay, data string, size int64) error {
	cmd := exec.CommandContext(ctx, "qemu-storage-daemon",
		"--chardev", "stdio,id=stdio", "--monitor", "stdio",
		"--blockdev", "file,node-name=file,filename="+qmpEscape(overlay),
		"--blockdev", "file,node-name=data-file,filename="+qmpEscape(data))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start qemu-storage-daemon: %w", err)
	}
	serr := overlaySession(stdin, stdout, size)
	_ = stdin.Close()
	_, _ = io.Copy(io.Discard, stdout)
	werr := cmd.Wait()
	if ctx.Err() != nil {
		return fmt.Errorf("qemu-storage-daemon: %w", ctx.Err())
	}
	if serr != nil || werr != nil {
		return fmt.Errorf("qemu-storage-daemon: %w: %s", errors.Join(serr, werr), strings.TrimSpace(stderr.String()))
	}
	return nil
}

// qmpEscape doubles the commas of a path for QEMU's option syntax.
func qmpEscape(s string) string { return strings.ReplaceAll(s, ",", ",,") }

// overlaySession runs the blockdev-create job over QMP and quits.
func overlaySession(stdin io.Writer, stdout io.Reader, size int64) error {
	in := bufio.NewScanner(stdout)
	in.Buffer(make([]byte, 64<<10), 1<<20)
	send := func(cmd string, args any) error {
		b, err := json.Marshal(map[string]any{"execute": cmd, "arguments": args})
		if err != nil {
			return err
		}
		_, err = stdin.Write(append(b, '\n'))
		return err
	}
	// reply reads up to the command's answer, watching the job's events:
	// concluded tells when the job has ended.
	concluded := false
	reply := func() (json.RawMessage, error) {
		for in.Scan() {
			var m struct {
				Return json.RawMessage `json:"return"`
				Error  *struct {
					Desc string `json:"desc"`
				} `json:"error"`
				Event string `json:"event"`
				Data  struct {
					Status string `json:"status"`
				} `json:"data"`
			}
			if err := json.Unmarshal(in.Bytes(), &m); err != nil {
				continue
			}
			switch {
			case m.Error != nil:
				return nil, errors.New(m.Error.Desc)
			case m.Event == "JOB_STATUS_CHANGE" && m.Data.Status == "concluded":
				concluded = true
			case m.Return != nil:
				return m.Return, nil
			}
		}
		if err := in.Err(); err != nil {
			return nil, err
		}
		return nil, errors.New("the monitor closed")
	}
	steps := []struct {
		cmd  string
		args any
	}{
		{"qmp_capabilities", map[string]any{}},
		{"blockdev-create", map[string]any{"job-id": "create", "options": map[string]any{
			"driver": "qcow2", "file": "file", "data-file": "data-file", "data-file-raw": true, "size": size}}},
	}
	// The greeting comes first.
	if !in.Scan() {
		return errors.New("no QMP greeting")
	}
	for _, s := range steps {
		if err := send(s.cmd, s.args); err != nil {
			return err
		}
		if _, err := reply(); err != nil {
			return fmt.Errorf("%s: %w", s.cmd, err)
		}
	}
	for !concluded {
		if err := send("query-jobs", map[string]any{}); err != nil {
			return err
		}
		r, err := reply()
		if err != nil {
			return fmt.Errorf("query-jobs: %w", err)
		}
		var jobs []struct{ ID, Status, Error string }
		_ = json.Unmarshal(r, &jobs)
		for _, j := range jobs {
			if j.ID != "create" || j.Status != "concluded" {
				continue
			}
			if j.Error != "" {
				return fmt.Errorf("blockdev-create: %s", j.Error)
			}
			concluded = true
		}
		if !concluded {
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, c := range []string{"job-dismiss", "quit"} {
		var args any = map[string]any{}
		if c == "job-dismiss" {
			args = map[string]any{"id": "create"}
		}
		if err := send(c, args); err != nil {
			return err
		}
		if _, err := reply(); err != nil && c != "quit" {
			return fmt.Errorf("%s: %w", c, err)
		}
	}
	return nil
}

// cbtOverlayDirs are the directories a fresh overlay may have made.
func (p *Preparer) cbtOverlayDirs() []string { return []string{p.Layout.CBTDir(p.Root)} }
