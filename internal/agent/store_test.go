package agent

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

// Replies as qemu-guest-agent 7.2 gives them (the shapes of QEMU's
// qga/qapi-schema.json; test/conformance checks the live agent's).
const (
	replyInfo     = `{"return":{"version":"7.2.22","supported_commands":[{"enabled":true,"name":"guest-ping","success-response":true},{"enabled":false,"name":"guest-exec","success-response":true}]}}`
	replyOSInfo   = `{"return":{"name":"Debian GNU/Linux","kernel-release":"6.1.0-41-amd64","version":"12 (bookworm)","pretty-name":"Debian GNU/Linux 12 (bookworm)","version-id":"12","kernel-version":"#1 SMP PREEMPT_DYNAMIC Debian 6.1.158-1","machine":"x86_64","id":"debian"}}`
	replyHostName = `{"return":{"host-name":"vm1"}}`
	replyTimezone = `{"return":{"zone":"CET","offset":3600}}`
	replyUsers    = `{"return":[{"user":"root","login-time":1764686400.123456},{"user":"alice","domain":"CORP","login-time":1764686500.5}]}`
	replyFSInfo   = `{"return":[{"name":"vda","mountpoint":"/","type":"ext4","used-bytes":1024,"total-bytes":4096,"disk":[{"serial":"D1","bus-type":"virtio","bus":0,"unit":0,"target":0,"dev":"/dev/vda","pci-controller":{"bus":0,"slot":4,"domain":0,"function":0}}]}]}`
	replyIfaces   = `{"return":[{"name":"lo","ip-addresses":[{"ip-address-type":"ipv4","ip-address":"127.0.0.1","prefix":8}],"hardware-address":"00:00:00:00:00:00"},` +
		`{"name":"eth0","ip-addresses":[{"ip-address-type":"ipv6","ip-address":"fe80::1","prefix":64},{"ip-address-type":"ipv4","ip-address":"10.0.2.2","prefix":24}],"hardware-address":"02:00:00:00:00:01"},` +
		`{"name":"eth0:1","ip-addresses":[{"ip-address-type":"ipv4","ip-address":"10.0.3.2","prefix":24}],"hardware-address":"02:00:00:00:00:01"},` +
		`{"name":"eth1","ip-addresses":[{"ip-address-type":"ipv6","ip-address":"fd10::2","prefix":64}],"hardware-address":"02:00:00:00:00:02"},` +
		`{"name":"eth2","hardware-address":"02:00:00:00:00:03"}]}`
	replyFrozen = `{"return":"frozen"}`
)

func TestRecordRefusesBadReplies(t *testing.T) {
	for _, tc := range []struct{ command, reply, want string }{
		{CmdInfo, `not json`, "guest-info: reply"},
		{CmdOSInfo, `{"error":{"class":"CommandNotFound","desc":"The command guest-get-osinfo has not been found"}}`, "agent error CommandNotFound"},
		{CmdUsers, `{"something":1}`, `has no "return"`},
		{CmdFSFreezeState, `{"return":""}`, "empty status"},
		{CmdFSFreezeState, `{"return":{"a":1}}`, "cannot unmarshal"},
		{"guest-exec", `{"return":{}}`, "not a command the store keeps"},
	} {
		s := NewStore()
		err := s.Record(tc.command, tc.reply)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Record(%s, %s) = %v, want an error with %q", tc.command, tc.reply, err, tc.want)
		}
		if g := s.GuestInfo(); !reflect.DeepEqual(g, NewStore().GuestInfo()) {
			t.Errorf("Record(%s) kept data from a bad reply: %+v", tc.command, g)
		}
		select {
		case <-s.Changed():
			t.Errorf("Record(%s) of a bad reply signalled a change", tc.command)
		default:
		}
	}
}

// TestEmptyStore: without data the answers are KubeVirt's, byte for byte.
func TestEmptyStore(t *testing.T) {
	s := NewStore()
	for _, tc := range []struct {
		v    any
		want string
	}{
		{s.GuestInfo(), `{"os":{},"timezone":", 0","fsInfo":{"disks":null}}`},
		{s.Users(), `[]`},
		{s.Filesystems(), `[]`},
	} {
		b, err := json.Marshal(tc.v)
		if err != nil || string(b) != tc.want {
			t.Errorf("got %s, %v; want %s", b, err, tc.want)
		}
	}
	var st domainjson.DomainStatus
	s.Overlay(&st)
	if !reflect.DeepEqual(st, domainjson.DomainStatus{}) {
		t.Errorf("empty store changed the Domain status: %+v", st)
	}
}

func TestRecordAndAnswers(t *testing.T) {
	s := NewStore()
	for _, r := range []struct{ command, reply string }{
		{CmdInfo, replyInfo}, {CmdOSInfo, replyOSInfo}, {CmdHostName, replyHostName}, {CmdTimezone, replyTimezone},
		{CmdUsers, replyUsers}, {CmdFSInfo, replyFSInfo}, {CmdInterfaces, replyIfaces}, {CmdFSFreezeState, replyFrozen},
	} {
		if err := s.Record(r.command, r.reply); err != nil {
			t.Fatalf("Record(%s): %v", r.command, err)
		}
	}
	wantOS := v1.VirtualMachineInstanceGuestOSInfo{
		Name: "Debian GNU/Linux", KernelRelease: "6.1.0-41-amd64", Version: "12 (bookworm)",
		PrettyName: "Debian GNU/Linux 12 (bookworm)", VersionID: "12",
		KernelVersion: "#1 SMP PREEMPT_DYNAMIC Debian 6.1.158-1", Machine: "x86_64", ID: "debian",
	}
	wantUsers := []v1.VirtualMachineInstanceGuestOSUser{
		{UserName: "root", LoginTime: 1764686400.123},
		{UserName: "alice", Domain: "CORP", LoginTime: 1764686500.5},
	}
	wantFS := []v1.VirtualMachineInstanceFileSystem{{
		DiskName: "vda", MountPoint: "/", FileSystemType: "ext4", UsedBytes: 1024, TotalBytes: 4096,
		Disk: []v1.VirtualMachineInstanceFileSystemDisk{{Serial: "D1", BusType: "virtio"}},
	}}
	want := v1.VirtualMachineInstanceGuestAgentInfo{
		GAVersion: "7.2.22",
		SupportedCommands: []v1.GuestAgentCommandInfo{
			{Name: "guest-ping", Enabled: true}, {Name: "guest-exec", Enabled: false},
		},
		Hostname: "vm1", OS: wantOS, Timezone: "CET, 3600", UserList: wantUsers,
		FSInfo: v1.VirtualMachineInstanceFileSystemInfo{Filesystems: wantFS}, FSFreezeStatus: "frozen",
	}
	if got := s.GuestInfo(); !reflect.DeepEqual(got, want) {
		t.Errorf("GuestInfo:\n got %+v\nwant %+v", got, want)
	}
	if got := s.Users(); !reflect.DeepEqual(got, wantUsers) {
		t.Errorf("Users = %+v, want %+v", got, wantUsers)
	}
	if got := s.Filesystems(); !reflect.DeepEqual(got, wantFS) {
		t.Errorf("Filesystems = %+v, want %+v", got, wantFS)
	}

	var st domainjson.DomainStatus
	s.Overlay(&st)
	wantStatus := domainjson.DomainStatus{
		Interfaces: []domainjson.InterfaceStatus{
			{InterfaceName: "eth0", Mac: "02:00:00:00:00:01", Ip: "10.0.2.2", IPs: []string{"fe80::1", "10.0.2.2", "10.0.3.2"}},
			{InterfaceName: "eth1", Mac: "02:00:00:00:00:02", Ip: "fd10::2", IPs: []string{"fd10::2"}},
			{InterfaceName: "eth2", Mac: "02:00:00:00:00:03"},
		},
		OSInfo: domainjson.GuestOSInfo{
			Name: "Debian GNU/Linux", KernelRelease: "6.1.0-41-amd64", Version: "12 (bookworm)",
			PrettyName: "Debian GNU/Linux 12 (bookworm)", VersionId: "12",
			KernelVersion: "#1 SMP PREEMPT_DYNAMIC Debian 6.1.158-1", Machine: "x86_64", Id: "debian",
		},
		FSFreezeStatus: domainjson.FSFreeze{Status: "frozen"},
	}
	if !reflect.DeepEqual(st, wantStatus) {
		t.Errorf("Domain status:\n got %+v\nwant %+v", st, wantStatus)
	}
}

// TestGuestInfoLimits: GetGuestInfo carries 10 users and file systems,
// GetUsers and GetFilesystems all of them.
func TestGuestInfoLimits(t *testing.T) {
	var users, fs []string
	for i := range 12 {
		users = append(users, `{"user":"u`+string(rune('a'+i))+`","login-time":1}`)
		fs = append(fs, `{"name":"d`+string(rune('a'+i))+`","mountpoint":"/m","type":"ext4"}`)
	}
	s := NewStore()
	if err := s.Record(CmdUsers, `{"return":[`+strings.Join(users, ",")+`]}`); err != nil {
		t.Fatal(err)
	}
	if err := s.Record(CmdFSInfo, `{"return":[`+strings.Join(fs, ",")+`]}`); err != nil {
		t.Fatal(err)
	}
	g := s.GuestInfo()
	if len(g.UserList) != 10 || len(g.FSInfo.Filesystems) != 10 || len(s.Users()) != 12 || len(s.Filesystems()) != 12 {
		t.Errorf("GuestInfo has %d users, %d file systems; Users %d, Filesystems %d; want 10, 10, 12, 12",
			len(g.UserList), len(g.FSInfo.Filesystems), len(s.Users()), len(s.Filesystems()))
	}
}

// TestChanged: only a change of what the Domain carries signals.
func TestChanged(t *testing.T) {
	s := NewStore()
	changed := func() bool {
		select {
		case <-s.Changed():
			return true
		default:
			return false
		}
	}
	for _, step := range []struct {
		command, reply string
		want           bool
	}{
		{CmdInterfaces, replyIfaces, true},
		{CmdInterfaces, replyIfaces, false},
		{CmdInterfaces, `{"return":[{"name":"lo","hardware-address":"00:00:00:00:00:00"}]}`, true},
		{CmdOSInfo, replyOSInfo, true},
		{CmdOSInfo, replyOSInfo, false},
		{CmdFSFreezeState, `{"return":"thawed"}`, true},
		{CmdFSFreezeState, `{"return":"thawed"}`, false},
		{CmdFSFreezeState, replyFrozen, true},
		{CmdUsers, replyUsers, false},
		{CmdHostName, replyHostName, false},
		{CmdInfo, replyInfo, false},
	} {
		if err := s.Record(step.command, step.reply); err != nil {
			t.Fatal(err)
		}
		if got := changed(); got != step.want {
			t.Errorf("Record(%s, %.40s...): changed %v, want %v", step.command, step.reply, got, step.want)
		}
	}
	// An interface list that became empty (only the loopback) is reported as
	// such: the Domain's list is not left with the old interfaces.
	ifaces, _, _ := s.DomainStatus()
	if ifaces != nil {
		t.Errorf("interfaces after a loopback-only reply: %+v", ifaces)
	}
}
