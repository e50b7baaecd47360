// Package agent follows a guest's qemu-guest-agent as KubeVirt's launcher
// does (virtwrap/agent-poller): a Poller runs the agent's read-only
// commands at KubeVirt's intervals while the agent is connected and the
// guest runs, and a Store keeps the last answer of each. The Store gives
// the data in the shapes virt-handler reads: the Domain status (interfaces,
// OS, file-system freeze state) and the GetGuestInfo, GetUsers and
// GetFilesystems answers (docs/kubevirt-wire.md 1.4 for the RPCs, 2.2 for
// the Domain events).
package agent

import (
	"fmt"
	"reflect"
	"sync"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

// guestInfoListLimit is how many users and file systems GetGuestInfo
// carries, as in KubeVirt; GetUsers and GetFilesystems give them all.
const guestInfoListLimit = 10

// Store keeps what the agent last reported. Data stays after the agent
// goes away (KubeVirt's store is never emptied either: virt-handler only
// asks while the agent channel is connected). The zero value is not
// usable: use NewStore.
type Store struct {
	mu       sync.Mutex
	info     *Info
	os       *OSInfo
	hostname *string
	timezone *Timezone
	users    []User
	fs       []Filesystem
	ifaces   []domainjson.InterfaceStatus
	ifSet    bool
	fsfreeze *string
	load     *Load

	changed chan struct{}
}

// NewStore makes an empty store.
func NewStore() *Store { return &Store{changed: make(chan struct{}, 1)} }

// Changed receives a value after data the Domain carries (interfaces, OS
// info, freeze state) changed; several changes may be folded into one.
func (s *Store) Changed() <-chan struct{} { return s.changed }

func (s *Store) notify() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// The commands the poller runs, as qemu-guest-agent names them.
const (
	CmdInfo          = "guest-info"
	CmdOSInfo        = "guest-get-osinfo"
	CmdHostName      = "guest-get-host-name"
	CmdTimezone      = "guest-get-timezone"
	CmdUsers         = "guest-get-users"
	CmdFSInfo        = "guest-get-fsinfo"
	CmdInterfaces    = "guest-network-get-interfaces"
	CmdFSFreezeState = "guest-fsfreeze-status"
	CmdLoad          = "guest-get-load"
)

// Record decodes the reply of one of the commands above and keeps its
// data. A reply that does not decode changes nothing and is an error.
// Changed is signalled when data the Domain carries changed.
func (s *Store) Record(command, reply string) error {
	switch command {
	case CmdInfo:
		return record(s, command, reply, func(v Info) bool { s.info = &v; return false })
	case CmdOSInfo:
		return record(s, command, reply, func(v OSInfo) bool {
			changed := s.os == nil || *s.os != v
			s.os = &v
			return changed
		})
	case CmdHostName:
		return record(s, command, reply, func(v struct {
			HostName string `json:"host-name"`
		}) bool {
			s.hostname = &v.HostName
			return false
		})
	case CmdTimezone:
		return record(s, command, reply, func(v Timezone) bool { s.timezone = &v; return false })
	case CmdUsers:
		return record(s, command, reply, func(v []User) bool { s.users = v; return false })
	case CmdFSInfo:
		return record(s, command, reply, func(v []Filesystem) bool { s.fs = v; return false })
	case CmdInterfaces:
		return record(s, command, reply, func(v []Interface) bool {
			ifaces := guestInterfaces(v)
			changed := !s.ifSet || !reflect.DeepEqual(s.ifaces, ifaces)
			s.ifaces, s.ifSet = ifaces, true
			return changed
		})
	case CmdLoad:
		return record(s, command, reply, func(v Load) bool { s.load = &v; return false })
	case CmdFSFreezeState:
		st, err := FSFreezeStatus(reply)
		if err != nil {
			return err
		}
		s.mu.Lock()
		changed := s.fsfreeze == nil || *s.fsfreeze != st
		s.fsfreeze = &st
		s.mu.Unlock()
		if changed {
			s.notify()
		}
		return nil
	}
	return fmt.Errorf("%s: not a command the store keeps", command)
}

// record decodes reply into a T and hands it to keep under the store's
// lock; keep stores it and tells whether data the Domain carries changed.
func record[T any](s *Store, command, reply string, keep func(T) bool) error {
	var v T
	if err := decodeReturn(command, reply, &v); err != nil {
		return err
	}
	s.mu.Lock()
	changed := keep(v)
	s.mu.Unlock()
	if changed {
		s.notify()
	}
	return nil
}

// DomainStatus returns the agent data the Domain's status carries; a nil
// result is one the agent has not reported (the Domain keeps its own).
func (s *Store) DomainStatus() (ifaces []domainjson.InterfaceStatus, os *domainjson.GuestOSInfo, fsfreeze *domainjson.FSFreeze) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ifSet {
		ifaces = s.ifaces
	}
	if s.os != nil {
		os = &domainjson.GuestOSInfo{
			Name: s.os.Name, KernelRelease: s.os.KernelRelease, Version: s.os.Version,
			PrettyName: s.os.PrettyName, VersionId: s.os.VersionID, KernelVersion: s.os.KernelVersion,
			Machine: s.os.Machine, Id: s.os.ID,
		}
	}
	if s.fsfreeze != nil {
		fsfreeze = &domainjson.FSFreeze{Status: *s.fsfreeze}
	}
	return ifaces, os, fsfreeze
}

// Overlay puts the agent data into a Domain's status, as KubeVirt's
// notifier does before it sends a Domain.
func (s *Store) Overlay(st *domainjson.DomainStatus) {
	ifaces, os, fsfreeze := s.DomainStatus()
	if ifaces != nil {
		st.Interfaces = ifaces
	}
	if os != nil {
		st.OSInfo = *os
	}
	if fsfreeze != nil {
		st.FSFreezeStatus = *fsfreeze
	}
}

// GuestInfo is GetGuestInfo's answer. With no data it is KubeVirt's empty
// record, whose timezone reads ", 0".
func (s *Store) GuestInfo() v1.VirtualMachineInstanceGuestAgentInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var g v1.VirtualMachineInstanceGuestAgentInfo
	if s.info != nil {
		g.GAVersion = s.info.Version
		g.SupportedCommands = s.info.SupportedCommands
	}
	if s.hostname != nil {
		g.Hostname = *s.hostname
	}
	if s.fsfreeze != nil {
		g.FSFreezeStatus = *s.fsfreeze
	}
	if s.os != nil {
		g.OS = v1.VirtualMachineInstanceGuestOSInfo{
			Name: s.os.Name, KernelRelease: s.os.KernelRelease, Version: s.os.Version,
			PrettyName: s.os.PrettyName, VersionID: s.os.VersionID, KernelVersion: s.os.KernelVersion,
			Machine: s.os.Machine, ID: s.os.ID,
		}
	}
	var tz Timezone
	if s.timezone != nil {
		tz = *s.timezone
	}
	g.Timezone = fmt.Sprintf("%s, %d", tz.Zone, tz.Offset)
	for _, u := range limit(s.users, guestInfoListLimit) {
		g.UserList = append(g.UserList, userV1(u))
	}
	for _, f := range limit(s.fs, guestInfoListLimit) {
		g.FSInfo.Filesystems = append(g.FSInfo.Filesystems, filesystemV1(f))
	}
	return g
}

// Users is GetUsers' answer: every user, an empty (not nil) list without
// data.
func (s *Store) Users() []v1.VirtualMachineInstanceGuestOSUser {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []v1.VirtualMachineInstanceGuestOSUser{}
	for _, u := range s.users {
		out = append(out, userV1(u))
	}
	return out
}

// Filesystems is GetFilesystems' answer: every file system, an empty (not
// nil) list without data.
func (s *Store) Filesystems() []v1.VirtualMachineInstanceFileSystem {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []v1.VirtualMachineInstanceFileSystem{}
	for _, f := range s.fs {
		out = append(out, filesystemV1(f))
	}
	return out
}

// Load is the guest's load average; ok is false while the agent has not
// reported one (an agent without guest-get-load never does).
func (s *Store) Load() (l Load, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.load == nil {
		return Load{}, false
	}
	return *s.load, true
}

// Version is the agent's version ("" before guest-info answered).
func (s *Store) Version() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.info == nil {
		return ""
	}
	return s.info.Version
}

func limit[T any](l []T, n int) []T {
	if len(l) > n {
		return l[:n]
	}
	return l
}

func userV1(u User) v1.VirtualMachineInstanceGuestOSUser {
	return v1.VirtualMachineInstanceGuestOSUser{UserName: u.User, Domain: u.Domain, LoginTime: loginSeconds(u.LoginTime)}
}

func filesystemV1(f Filesystem) v1.VirtualMachineInstanceFileSystem {
	disks := []v1.VirtualMachineInstanceFileSystemDisk{}
	for _, d := range f.Disk {
		disks = append(disks, v1.VirtualMachineInstanceFileSystemDisk{Serial: d.Serial, BusType: d.BusType})
	}
	return v1.VirtualMachineInstanceFileSystem{
		DiskName: f.Name, MountPoint: f.Mountpoint, FileSystemType: f.Type,
		UsedBytes: f.UsedBytes, TotalBytes: f.TotalBytes, Disk: disks,
	}
}
