package domain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/digitalocean/go-libvirt"
	backupv1 "kubevirt.io/api/backup/v1alpha1"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/domain/bounded"
	"github.com/virtlauncher/virtlauncher/internal/domain/devices"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// A checkpoint is libvirt's record of a backup's bitmaps. The bitmaps
// live in the disks' overlays (persistent, so they outlive QEMU), the
// record in the daemon: a VM started again in a new pod, or migrated,
// has the bitmaps but no record, and virt-handler asks for the last
// checkpoint to be redefined before the next incremental backup, as
// KubeVirt v1.9's launcher does it: from the bitmaps QEMU has opened.

// errCheckpointNotEnabled is KubeVirt's refusal of a redefinition
// without CBT, word for word.
//
//lint:ignore ST1005 KubeVirt's message, shown to virt-handler.
var errCheckpointNotEnabled = errors.New("Redefine checkpoint failed: ChangedBlockTracking is not enabled")

// blockNode is the part of QEMU's query-named-block-nodes answer read:
// a node's file and its dirty bitmaps.
type blockNode struct {
	File         string `json:"file"`
	DirtyBitmaps []struct {
		Name         string `json:"name"`
		Inconsistent bool   `json:"inconsistent"`
	} `json:"dirty-bitmaps"`
}

// checkpointDisks picks the tracked disks whose overlay QEMU has opened
// with a consistent bitmap of the checkpoint's name (an inconsistent one,
// left by a QEMU that did not close the image, counts as absent).
func checkpointDisks(disks []diskFile, nodes []blockNode, name string) []string {
	has := map[string]bool{}
	for _, n := range nodes {
		for _, b := range n.DirtyBitmaps {
			if b.Name == name && !b.Inconsistent {
				has[n.File] = true
			}
		}
	}
	var out []string
	for _, d := range disks {
		if d.tracked && has[d.file] {
			out = append(out, d.target)
		}
	}
	sort.Strings(out)
	return out
}

// diskFile is a disk's target, its source file and whether it is tracked.
type diskFile struct {
	target, file string
	tracked      bool
}

func diskFiles(live *libvirtxml.Domain, dataFiles map[string]string) []diskFile {
	var out []diskFile
	for _, d := range live.Devices.Disks {
		if d.Target == nil || d.Source == nil || d.Source.File == nil {
			continue
		}
		_, tracked := dataFiles[d.Source.File.File]
		out = append(out, diskFile{target: d.Target.Dev, file: d.Source.File.File, tracked: tracked})
	}
	return out
}

// checkpointInvalid tells whether libvirt refused a redefinition because
// the checkpoint does not fit the disks (its bitmaps gone or broken).
func checkpointInvalid(err error) bool {
	var le libvirt.Error
	if !errors.As(err, &le) {
		return false
	}
	switch libvirt.ErrorNumber(le.Code) {
	case libvirt.ErrInvalidDomainCheckpoint, libvirt.ErrNoDomainCheckpoint, libvirt.ErrCheckpointInconsistent:
		return true
	}
	return false
}

// RedefineCheckpoint redefines checkpoint cp over the tracked disks whose
// overlays hold its bitmap. invalid is true when none does, or libvirt
// finds the bitmaps unusable.
func (m *Manager) RedefineCheckpoint(ctx context.Context, v *v1.VirtualMachineInstance, cp *backupv1.BackupCheckpoint) (invalid bool, err error) {
	if !vmi.CBTActive(v) {
		return false, errCheckpointNotEnabled
	}
	if err := layout.CheckName(cp.Name); err != nil {
		return false, fmt.Errorf("redefine checkpoint failed: invalid checkpoint info: name: %w", err)
	}
	if err := m.op.lock(ctx); err != nil {
		return false, fmt.Errorf("redefine checkpoint: %w", err)
	}
	defer m.op.unlock()
	if err := m.checkIdentity(v, false); err != nil {
		return false, err
	}
	l, d, ok, err := m.lookup(ctx)
	if err != nil {
		return false, fmt.Errorf("failed to lookup domain: %w", err)
	}
	if !ok {
		return false, errors.New("failed to lookup domain: no domain is defined")
	}
	ctx, cancel := context.WithTimeout(ctx, backupCallTimeout)
	defer cancel()
	live, err := devices.ReadXML(ctx, l, d, 0)
	if err != nil {
		return false, fmt.Errorf("failed to get domain disks: %w", err)
	}
	// A daemon that outlived a launcher restart (or was restarted with
	// its state) knows the checkpoint still: nothing to redefine
	// (libvirt refuses a redefinition of a known checkpoint without its
	// creation time).
	var known bool
	if err := bounded.Call(ctx, "look the checkpoint up", func() error {
		_, lerr := l.DomainCheckpointLookupByName(d, cp.Name, 0)
		known = lerr == nil
		return nil
	}); err != nil {
		return false, err
	}
	if known {
		m.log.Info("checkpoint known to libvirt already: nothing to redefine", "checkpoint", cp.Name)
		return false, nil
	}
	var out string
	if err := bounded.Call(ctx, "query the block nodes' bitmaps", func() (err error) {
		out, err = l.QEMUDomainMonitorCommand(d, `{"execute":"query-named-block-nodes"}`, 0)
		return err
	}); err != nil {
		return false, fmt.Errorf("failed to query bitmaps: %w", err)
	}
	var reply struct {
		Return []blockNode `json:"return"`
	}
	if err := json.Unmarshal([]byte(out), &reply); err != nil {
		return false, fmt.Errorf("failed to query bitmaps: parse QEMU's answer: %w", err)
	}
	m.mu.Lock()
	dataFiles := m.md.DataFiles
	m.mu.Unlock()
	targets := checkpointDisks(diskFiles(live, dataFiles), reply.Return, cp.Name)
	if len(targets) == 0 {
		return true, fmt.Errorf("no disks found with checkpoint bitmap %s", cp.Name)
	}
	x := libvirtxml.DomainCheckpoint{Name: cp.Name, Disks: &libvirtxml.DomainCheckpointDisks{}}
	for _, t := range targets {
		x.Disks.Disks = append(x.Disks.Disks, libvirtxml.DomainCheckpointDisk{Name: t, Checkpoint: "bitmap"})
	}
	if cp.CreationTime != nil {
		x.CreationTime = strconv.FormatInt(cp.CreationTime.Unix(), 10)
	}
	doc, err := x.Marshal()
	if err != nil {
		return false, fmt.Errorf("failed to marshal checkpoint XML: %w", err)
	}
	flags := uint32(libvirt.DomainCheckpointCreateRedefine | libvirt.DomainCheckpointCreateRedefineValidate)
	if err := bounded.Call(ctx, "redefine the checkpoint", func() error {
		_, err := l.DomainCheckpointCreateXML(d, doc, flags)
		return err
	}); err != nil {
		return checkpointInvalid(err), fmt.Errorf("failed to redefine checkpoint %s: %w", cp.Name, err)
	}
	m.log.Info("checkpoint redefined", "checkpoint", cp.Name, "disks", targets)
	return false, nil
}
