package testguest

import (
	"fmt"
	"strconv"
	"strings"
)

// Markers the guest's init prints on its console, one per line (a line may
// start with other console output, e.g. a shell prompt: match with
// strings.Contains or FindMarker). Where a marker takes arguments they follow
// it on the same line, as shown.
const (
	// "VL-BOOTED <kernel release> uptime <seconds>": init started.
	MarkerBooted = "VL-BOOTED"
	// "VL-MODULE-FAILED <module path>": insmod failed.
	MarkerModuleFailed = "VL-MODULE-FAILED"
	// "VL-ROOT-MOUNTED <dev>": the ext4 disk labelled RootLabel is mounted.
	MarkerRootMounted = "VL-ROOT-MOUNTED"
	// "VL-NO-ROOT": no such disk.
	MarkerNoRoot = "VL-NO-ROOT"
	// "VL-DISK-WRITTEN <dev>": the boot counter was written and synced.
	MarkerDiskWritten = "VL-DISK-WRITTEN"
	// "VL-BOOT-COUNT <n>": boots seen by this root disk, this one included.
	MarkerBootCount = "VL-BOOT-COUNT"
	// "VL-DISK <name> size <512-byte sectors> ro <0|1> serial <serial|none>":
	// one line per block device (vda, sda, sr0, ...).
	MarkerDisk = "VL-DISK"
	// "VL-CLOUDINIT <nocloud|configdrive> <dev>": the cloud-init ISO is mounted.
	MarkerCloudInit = "VL-CLOUDINIT"
	// "VL-NO-CLOUDINIT": no disk labelled cidata or config-2.
	MarkerNoCloudInit = "VL-NO-CLOUDINIT"
	// The meta-data and user-data files are printed between these lines.
	MarkerMetaDataBegin = "VL-METADATA-BEGIN"
	MarkerMetaDataEnd   = "VL-METADATA-END"
	MarkerUserDataBegin = "VL-USERDATA-BEGIN"
	MarkerUserDataEnd   = "VL-USERDATA-END"
	// "VL-USERDATA-RAN rc=<exit code>": user-data starting with "#!" was run.
	MarkerUserDataRan = "VL-USERDATA-RAN"
	// MarkerCloudConfigUser: a #cloud-config user-data named a user, made
	// with its ssh_authorized_keys: "NAME keys N".
	MarkerCloudConfigUser = "VL-CLOUDCONFIG-USER"
	// "VL-NETIF <name> mac <mac> mtu <mtu>": one line per network interface.
	MarkerNetIf = "VL-NETIF"
	// "VL-DHCP <ip>/<prefix> router <gw,...> dns <ns,...> search <dom,...>
	// mtu <n> domain <d> hostname <h>": eth0 got a lease (absent values are
	// "none"); see ParseDHCP.
	MarkerDHCP = "VL-DHCP"
	// "VL-DHCP-FAILED": eth0 got no lease.
	MarkerDHCPFailed = "VL-DHCP-FAILED"
	// "VL-EFI <n> variables": booted by EFI firmware, efivarfs mounted with
	// n variables.
	MarkerEFI = "VL-EFI"
	// "VL-EFIVAR <name>=<value>": one line per EFI variable of the guest's
	// own vendor GUID (EFIVarGUID), after OptEFIVar's write.
	MarkerEFIVar = "VL-EFIVAR"
	// "VL-TPM /dev/tpm0 ek <bytes> <sha256 prefix>": the guest has a TPM; the
	// TPM2_ReadPublic answer for the endorsement key (handle 0x81010001)
	// is that long and hashes to that (more than 10 bytes: the key exists).
	MarkerTPM = "VL-TPM"
	// "VL-READY uptime <seconds>": boot finished; a shell runs on the console
	// (prompt "vl# ") unless vl.noshell=1.
	MarkerReady = "VL-READY"
	// "VL-POWER-BUTTON": the ACPI power button was pressed; power-off follows.
	MarkerPowerButton = "VL-POWER-BUTTON"
	// "VL-ACPI-IGNORED": the power button was pressed with vl.noacpi=1.
	MarkerACPIIgnored = "VL-ACPI-IGNORED"
	// "VL-POWEROFF": disks synced and unmounted, poweroff -f follows.
	MarkerPowerOff = "VL-POWEROFF"
	// "VL-AGENT /dev/vportNpM": the guest agent starts on that port (the
	// one the host names org.qemu.guest_agent.0); not printed with
	// vl.noagent=1 or when the VM has no such port.
	MarkerAgent = "VL-AGENT"
	// "VL-GA-POWEROFF", "VL-GA-REBOOT": the agent's guest-shutdown
	// powers off or reboots the guest (OptAgentShutdown); "VL-GA-HANG": it
	// hangs (OptAgentShutdownHang). No marker is a prefix of another one.
	MarkerAgentShutdown     = "VL-GA-POWEROFF"
	MarkerAgentReboot       = "VL-GA-REBOOT"
	MarkerAgentShutdownHang = "VL-GA-HANG"
	// "VL-PASSWORD-SET <user>": the agent set the user's password
	// (guest-set-user-password, through the guest's chpasswd).
	MarkerPasswordSet = "VL-PASSWORD-SET"
	// "VL-SSHD <port>": the SSH server listens (started after the
	// network, whatever DHCP did).
	MarkerSSHD = "VL-SSHD"
	// "VL-FAKE-AGENT <garbage|silent> /dev/vportNpM": a fake agent runs
	// on the port instead of the real one (OptAgentGarbage, OptAgentSilent).
	MarkerFakeAgent = "VL-FAKE-AGENT"
	// "VL-LOGIN <flavour> <host name>": a login waits on the console
	// (OptLogin) instead of the shell.
	MarkerLogin = "VL-LOGIN"
	// "VL-REBOOT": the console shell's reboot (OptLogin); reboot -f follows.
	MarkerReboot = "VL-REBOOT"
	// "VL-METADATA-KEYS <user> <n>": n SSH keys of the cloud-init
	// meta-data (public-keys, public_keys) went to the default user.
	MarkerMetaDataKeys = "VL-METADATA-KEYS"
	// "VL-BOOT-MOUNT-FAILED </srv|/boot>": the Fedora stand-in could not
	// mount its data image at /srv or its boot disk at /boot.
	MarkerBootMountFailed = "VL-BOOT-MOUNT-FAILED"
	// "VL-SERVICE qemu-guest-agent <started|stopped>": the Fedora
	// stand-in's systemctl (OptTooling) started or stopped the agent.
	MarkerService = "VL-SERVICE"
)

// Kernel command-line options the init understands.
const (
	OptNoACPI   = "vl.noacpi=1"   // ignore the ACPI power button
	OptPowerOff = "vl.poweroff=1" // power off right after booting
	OptNoDHCP   = "vl.nodhcp=1"   // no DHCP on eth0
	OptNoShell  = "vl.noshell=1"  // no shell on the console
	OptNoAgent  = "vl.noagent=1"  // no guest agent
	// OptAgentShutdown makes the agent's guest-shutdown power off (or
	// reboot) the guest; without it the guest has no working shutdown
	// command and the host falls back to ACPI. OptAgentShutdownHang makes
	// it hang instead.
	OptAgentShutdown     = "vl.agentshutdown=1"
	OptAgentShutdownHang = "vl.agentshutdown=hang"
	// OptAgentGarbage and OptAgentSilent replace the agent with a fake on
	// its port, for the faults a real agent does not produce: one that
	// answers every line with bytes that are not JSON, one that reads and
	// never answers.
	OptAgentGarbage = "vl.agentfake=garbage"
	OptAgentSilent  = "vl.agentfake=silent"
)

// OptAgentBlock runs the agent with these commands disabled (qemu-ga
// --block-rpcs), as an agent built without them or older than them looks.
func OptAgentBlock(commands ...string) string {
	return "vl.agentblock=" + strings.Join(commands, ",")
}

// Login flavours (OptLogin): what KubeVirt's functional tests expect of
// its alpine, cirros and Fedora test images on the serial console.
const (
	LoginAlpine = "alpine" // root, no password, "Welcome to Alpine" issue
	// LoginAlpineTestTooling is alpine's login with a /bin/bash (busybox's
	// sh), for the image KubeVirt's tests give a "#!/bin/bash" user-data
	// and expect the guest agent in: give the guest one (no OptNoAgent).
	LoginAlpineTestTooling = "alpine-with-test-tooling"
	LoginCirros            = "cirros" // cirros / gocubsgo, cirros' issue line, sudo
	// LoginFedoraTestTooling is Fedora's login: fedora / fedora, Fedora's
	// issue line, bash's "[fedora@<host> ~]$ " prompt, a sudo without a
	// password ("sudo su": "[root@<host> fedora]# "), the user fedora as
	// cloud-init's default user, and an /etc/os-release naming Fedora;
	// the image has the guest agent, which can shut it down: give the
	// guest one (no OptNoAgent) and OptAgentShutdown.
	LoginFedoraTestTooling = "fedora-with-test-tooling"
)

// OptLogin replaces the console shell with a getty login as the flavour
// (LoginAlpine, LoginAlpineTestTooling, LoginCirros,
// LoginFedoraTestTooling) has it: the image's /etc/issue, "<host name>
// login: ", its user and password, its shell prompt, a host name
// from DHCP or NoCloud meta-data (else localhost); poweroff and reboot in
// that shell work.
func OptLogin(flavour string) string { return "vl.login=" + flavour }

// EFIVarGUID is the vendor GUID of the EFI variables the guest writes and
// lists.
const EFIVarGUID = "c0a2b8a5-6f4e-4b7e-9d51-766c74657374"

// OptEFIVar asks the guest to write EFI variable name (letters and digits)
// with value (no spaces) under EFIVarGUID.
func OptEFIVar(name, value string) string { return "vl.efivar=" + name + "=" + value }

// RootLabel is the file system label of the root disk image.
const RootLabel = "vlroot"

// DefaultCmdline is a kernel command line for the guest on a serial console.
// no_timer_check skips the kernel's check that the 8254 timer reaches the
// IO-APIC: under TCG on a loaded machine it reports the timer not connected
// ("MP-BIOS bug") and a guest was seen hanging there for minutes (make
// test, 2026-12-04); virtual machines do not need the check.
const DefaultCmdline = "console=ttyS0 quiet panic=-1 no_timer_check"

// FindMarker returns the text after marker on the first complete line of
// console output that contains it, and whether there was one. A line still
// being written (no newline yet) does not count: the console is read while
// the guest writes it, and half a line would be taken for the whole.
func FindMarker(output, marker string) (string, bool) {
	all := findMarkers(output, marker)
	if len(all) == 0 {
		return "", false
	}
	return all[0], true
}

// CountMarker is how many complete lines of output have marker (a guest
// that rebooted prints its boot markers again).
func CountMarker(output, marker string) int { return len(findMarkers(output, marker)) }

// findMarkers returns the text after marker on each complete line that
// has it.
func findMarkers(output, marker string) []string {
	if i := strings.LastIndexByte(output, '\n'); i >= 0 {
		output = output[:i]
	} else {
		output = ""
	}
	var found []string
	for _, line := range strings.Split(output, "\n") {
		if i := strings.Index(line, marker); i >= 0 {
			rest := line[i+len(marker):]
			// "VL-DISK" must not match "VL-DISK-WRITTEN".
			if rest != "" && rest[0] != ' ' && rest[0] != '\r' {
				continue
			}
			found = append(found, strings.TrimSpace(rest))
		}
	}
	return found
}

// Between returns the lines of output between the begin and end markers
// (e.g. MarkerUserDataBegin, MarkerUserDataEnd), without the trailing empty
// line the init adds.
func Between(output, begin, end string) (string, bool) {
	output = strings.ReplaceAll(output, "\r\n", "\n")
	i := strings.Index(output, begin+"\n")
	if i < 0 {
		return "", false
	}
	rest := output[i+len(begin)+1:]
	j := strings.Index(rest, "\n"+end)
	if j < 0 {
		return "", false
	}
	return strings.TrimSuffix(rest[:j], "\n"), true
}

// DHCPLease is a parsed MarkerDHCP line.
type DHCPLease struct {
	Address  string // "10.0.2.15/24"
	Routers  []string
	DNS      []string
	Search   []string
	MTU      int // 0 when the lease had none
	Domain   string
	Hostname string
}

// ParseDHCP parses the arguments of a MarkerDHCP line (as FindMarker
// returns them).
func ParseDHCP(args string) (DHCPLease, error) {
	f := strings.Fields(args)
	if len(f) != 13 {
		return DHCPLease{}, fmt.Errorf("%s line %q: want 13 fields, got %d", MarkerDHCP, args, len(f))
	}
	l := DHCPLease{Address: f[0]}
	list := func(s string) []string {
		if s == "none" {
			return nil
		}
		return strings.Split(s, ",")
	}
	none := func(s string) string {
		if s == "none" {
			return ""
		}
		return s
	}
	for i := 1; i+1 < len(f); i += 2 {
		k, v := f[i], f[i+1]
		switch k {
		case "router":
			l.Routers = list(v)
		case "dns":
			l.DNS = list(v)
		case "search":
			l.Search = list(v)
		case "mtu":
			if v != "none" {
				n, err := strconv.Atoi(v)
				if err != nil {
					return DHCPLease{}, fmt.Errorf("%s line %q: mtu: %w", MarkerDHCP, args, err)
				}
				l.MTU = n
			}
		case "domain":
			l.Domain = none(v)
		case "hostname":
			l.Hostname = none(v)
		default:
			return DHCPLease{}, fmt.Errorf("%s line %q: unknown key %q", MarkerDHCP, args, k)
		}
	}
	return l, nil
}

// CounterScript is user-data (one shell line) that counts on the serial
// console, ten a second, for the whole life of the guest: "VL-COUNT-0",
// "VL-COUNT-1"... A guest moved by a live migration counts on in its new
// pod from where it was; one that booted again starts over.
const CounterScript = `(i=0; while :; do echo "VL-COUNT-$i"; i=$((i+1)); sleep 0.1; done) &`

// Counts are the counter values (CounterScript) a console shows, in order.
// A count is "VL-COUNT-" and digits anywhere in a line: the kernel's
// messages may share its line.
func Counts(console string) []int {
	const prefix = "VL-COUNT-"
	var out []int
	for rest := console; ; {
		i := strings.Index(rest, prefix)
		if i < 0 {
			return out
		}
		rest = rest[i+len(prefix):]
		j := 0
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		if n, err := strconv.Atoi(rest[:j]); err == nil {
			out = append(out, n)
		}
		rest = rest[j:]
	}
}
