package standalone

import (
	"time"

	"github.com/virtlauncher/virtlauncher/internal/kvm"
	"github.com/virtlauncher/virtlauncher/internal/podnet"
	"github.com/virtlauncher/virtlauncher/internal/runrecord"
)

// The run record (runrecord) as this run writes it.

// writeRecord records the run for `vlctl ps`, the verbs by name and vlctl
// gc: first while it starts (st nil), then again once the guest runs.
func (r *runner) writeRecord(st *Started) error {
	pid, start, err := runrecord.Self()
	if err != nil {
		return err
	}
	pod, outside := podnet.NamespaceNames(r.pod.netName)
	rec := &runrecord.Record{Name: r.vmi.Name, Namespace: r.vmi.Namespace, WorkDir: r.workDir, VMI: r.vmi, VM: r.vm,
		Process:  runrecord.Process{PID: pid, PIDStart: start},
		Sockets:  runrecord.Sockets{Socket: r.layout.ReadySocket(), Console: r.consoleSocket(), Control: r.controlSocket()},
		Cleanup:  runrecord.Cleanup{NetNS: []string{pod, outside}, Keep: r.cfg.Keep},
		Takeover: runrecord.Takeover{Emulation: r.emulation(), Images: r.cfg.pulled}}
	if root := r.launcherRoot(); root != r.workDir {
		rec.LauncherRoot = root
	}
	for _, m := range r.cfg.Volumes {
		if rec.Volumes == nil {
			rec.Volumes = map[string]string{}
		}
		rec.Volumes[m.Name] = m.Path
	}
	if r.owner.lease != nil {
		rec.UID = r.owner.lease.ID
	}
	for _, pb := range r.cfg.Publish {
		rec.Published = append(rec.Published, pb.Recorded())
	}
	rec.Grants = r.storage.Grants()
	if st != nil {
		rec.Started = time.Now().UTC()
		if st.PodAddress != "" {
			rec.Addresses = append(rec.Addresses, runrecord.Address{IP: st.PodAddress, NetNS: st.OutsideNS})
		}
	}
	if r.record == "" && r.owner.lease != nil {
		// The lease names the record before it exists: the id stays
		// leased until the record's clean-up is done, whichever record
		// directory vlctl gc reads.
		path, err := runrecord.Path(r.cfg.RecordDir, rec)
		if err != nil {
			return err
		}
		if err := r.owner.lease.SetRecord(path); err != nil {
			return err
		}
	}
	path, err := runrecord.Write(r.cfg.RecordDir, rec)
	if err != nil {
		return err
	}
	r.record = path
	return nil
}

// emulation says whether the guest runs under TCG: asked for, or KVM
// unusable here. kvm.Usable cannot tell a nested setup where guests do not
// progress; --emulation is for that.
func (r *runner) emulation() bool { return r.cfg.Emulation || kvm.Usable() != nil }
