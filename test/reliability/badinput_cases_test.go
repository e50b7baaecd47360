package reliability

import (
	"fmt"
	"regexp"
	"strings"
)

// badCase is one bad manifest, tried through every entry point.
type badCase struct {
	name string
	// doc turns the good test VMI (YAML) into the bad one.
	doc func(good string) string
	// want is a substring of the error vmi.Load, `vlctl convert` and
	// `vlctl run` must report: it names the field.
	want string
	// grpc is the substring the launcher's Sync failure message must hold
	// when the VMI arrives as JSON over gRPC; "" means want, "-" skips the
	// row over gRPC: input the launcher accepts on purpose (it decodes
	// like KubeVirt's launcher: unknown fields are dropped, since a newer
	// virt-handler may send fields it lacks).
	grpc string
	// knownBug, when set, skips the row with this description: a bug in a
	// package this suite does not own, reported to its owner.
	knownBug string
}

// replace swaps one exact piece of the good VMI; it panics when the piece
// is missing, so a row can never silently test the good VMI.
func replace(old, new string) func(string) string {
	return func(s string) string {
		if !strings.Contains(s, old) {
			panic(fmt.Sprintf("bad-input case: %q not in the test VMI", old))
		}
		return strings.Replace(s, old, new, 1)
	}
}

func constant(doc string) func(string) string { return func(string) string { return doc } }

// moreDisk adds a disk and a volume after the cloud-init one.
func moreDisk(disk, volume string) func(string) string {
	return func(s string) string {
		s = replace("      - name: cloudinit\n        disk:\n          bus: virtio\n",
			"      - name: cloudinit\n        disk:\n          bus: virtio\n"+disk)(s)
		return s + volume
	}
}

const (
	rootDisk   = "      - name: root\n        disk:\n          bus: virtio\n"
	rootVolume = "  - name: root\n    containerDisk:\n      image: registry.example/testguest-root:v1\n"
	scratchCap = "      capacity: 64Mi\n"
	memory     = "        memory: 128Mi\n"
	grace      = "  terminationGracePeriodSeconds: 30\n"
)

var bigUserData = "      userData: |\n        #!/bin/sh\n        # " + strings.Repeat("x", 300<<10) + "\n"

var badCases = []badCase{
	// Documents that do not decode.
	{name: "empty document", doc: constant(""), want: "empty", grpc: "manifest holds no object"},
	{name: "malformed YAML", doc: constant("apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nspec:\n  domain: [\n"), want: "yaml"},
	{name: "malformed JSON", doc: constant(`{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance","spec":{`), want: "did not find expected node content"},
	{name: "not an object", doc: constant("- a\n- b\n"), want: "object"},
	{name: "two objects in one stream", doc: func(s string) string { return s + "---\n" + s }, want: "2 objects"},
	{name: "kind Pod", doc: replace("kind: VirtualMachineInstance", "kind: Pod"), want: "kind"},
	{name: "kind VirtualMachineInstanceReplicaSet", doc: replace("kind: VirtualMachineInstance", "kind: VirtualMachineInstanceReplicaSet"), want: "kind"},
	{name: "apiVersion of another group", doc: replace("apiVersion: kubevirt.io/v1", "apiVersion: apps/v1"), want: "apiVersion"},
	{name: "unknown top-level field", doc: func(s string) string { return s + "bogus: 1\n" }, grpc: "-", want: "bogus"},
	{name: "unknown field in a disk", doc: replace(rootDisk, rootDisk+"        bogusField: 1\n"), grpc: "-", want: "spec.domain.devices.disks[0].bogusField"},
	{name: "wrong type for memory", doc: replace(memory, "        memory: [1]\n"), want: "spec.domain.resources.requests"},
	{name: "duplicate key", doc: replace("  namespace: ", "  name: again\n  namespace: "), want: `key "name" already set`},

	// Names that could leave their directory or collide.
	{name: "disk without a volume", doc: moreDisk("      - name: orphan\n        disk: {bus: virtio}\n", ""), want: "spec.domain.devices.disks[3]"},
	{name: "duplicate disk names", doc: replace("      - name: scratch\n", "      - name: root\n"), want: "spec.domain.devices.disks[1].name"},
	{name: "duplicate volume names", doc: replace("\n  - name: scratch\n", "\n  - name: root\n"), want: "spec.volumes[1].name"},
	{name: "disk name with /", doc: func(s string) string {
		s = replace("      - name: scratch\n", "      - name: a/b\n")(s)
		return replace("  - name: scratch\n", "  - name: a/b\n")(s)
	}, want: "spec.domain.devices.disks[1].name"},
	{name: "volume name ..", doc: func(s string) string {
		s = replace("      - name: scratch\n", "      - name: ..\n")(s)
		return replace("  - name: scratch\n", "  - name: ..\n")(s)
	}, want: "spec.volumes[1].name"},
	{name: "volume name ../escape", doc: func(s string) string {
		s = replace("      - name: scratch\n", "      - name: ../escape\n")(s)
		return replace("  - name: scratch\n", "  - name: ../escape\n")(s)
	}, want: "spec.volumes[1].name"},
	{name: "metadata.name with /", doc: replace("  name: bad\n", "  name: a/b\n"), want: "metadata.name"},
	{name: "metadata.name ..", doc: replace("  name: bad\n", "  name: ..\n"), want: "metadata.name"},
	{name: "metadata.namespace with ..", doc: replace("  namespace: default\n", "  namespace: ../etc\n"), want: "metadata.namespace"},
	{name: "metadata.name too long", doc: replace("  name: bad\n", "  name: "+strings.Repeat("a", 64)+"\n"), want: "metadata.name"},

	// Paths outside the allowed directories.
	{name: "hostDisk relative path", doc: moreDisk("      - name: host\n        disk: {bus: virtio}\n",
		"  - name: host\n    hostDisk:\n      path: ../../etc/shadow\n      type: Disk\n"), want: "spec.volumes[3].hostDisk.path"},
	{name: "hostDisk path with ..", doc: moreDisk("      - name: host\n        disk: {bus: virtio}\n",
		"  - name: host\n    hostDisk:\n      path: /var/tmp/../../etc/shadow\n      type: Disk\n"), want: "spec.volumes[3].hostDisk.path"},
	{name: "hostDisk path is ..", doc: moreDisk("      - name: host\n        disk: {bus: virtio}\n",
		"  - name: host\n    hostDisk:\n      path: ..\n      type: DiskOrCreate\n      capacity: 1Mi\n"), want: "spec.volumes[3].hostDisk.path"},
	{name: "hostDisk path is /", doc: moreDisk("      - name: host\n        disk: {bus: virtio}\n",
		"  - name: host\n    hostDisk:\n      path: /\n      type: DiskOrCreate\n      capacity: 1Mi\n"), want: "spec.volumes[3].hostDisk.path"},
	{name: "hostDisk path with NUL", doc: moreDisk("      - name: host\n        disk: {bus: virtio}\n",
		"  - name: host\n    hostDisk:\n      path: \"/tmp/a\\0b\"\n      type: Disk\n"), want: "spec.volumes[3].hostDisk.path"},
	{name: "containerDisk path relative", doc: replace("      image: registry.example/testguest-root:v1\n",
		"      image: registry.example/testguest-root:v1\n      path: ../../../etc/shadow\n"), want: "spec.volumes[0].containerDisk.path"},

	// Sizes and counts.
	{name: "emptyDisk capacity negative", doc: replace(scratchCap, "      capacity: -64Mi\n"), want: "spec.volumes[1].emptyDisk.capacity"},
	{name: "emptyDisk capacity zero", doc: replace(scratchCap, "      capacity: \"0\"\n"), want: "spec.volumes[1].emptyDisk.capacity"},
	{name: "emptyDisk capacity absurd", doc: replace(scratchCap, "      capacity: 900Ei\n"), want: "spec.volumes[1].emptyDisk.capacity"},
	{name: "emptyDisk capacity not a quantity", doc: replace(scratchCap, "      capacity: lots\n"), want: "spec.volumes[1].emptyDisk.capacity"},
	{name: "hostDisk capacity negative", doc: moreDisk("      - name: host\n        disk: {bus: virtio}\n",
		"  - name: host\n    hostDisk:\n      path: /var/tmp/vl-host.img\n      type: DiskOrCreate\n      capacity: -1Gi\n"), want: "spec.volumes[3].hostDisk.capacity"},
	{name: "memory negative", doc: replace(memory, "        memory: -128Mi\n"), want: "spec.domain.resources.requests[memory]"},
	{name: "memory absurd", doc: replace(memory, "        memory: 64Pi\n"), want: "memory"},
	{name: "memory huge exponent", doc: replace(memory, "        memory: 1e1000000\n"), want: "memory"},
	{name: "cpu cores negative", doc: replace(memory, memory+"    cpu:\n      cores: -2\n"), want: "spec.domain.cpu.cores"},
	{name: "cpu cores absurd", doc: replace("  domain:\n", "  domain:\n    cpu:\n      cores: 100000\n"), want: "spec.domain.cpu"},
	{name: "cpu sockets x threads overflow", doc: replace("  domain:\n", "  domain:\n    cpu:\n      sockets: 65536\n      cores: 65536\n      threads: 65536\n"), want: "spec.domain.cpu"},
	{name: "too many disks", doc: func(s string) string {
		var d, v strings.Builder
		for i := 0; i < 300; i++ {
			fmt.Fprintf(&d, "      - name: e%d\n        disk: {bus: virtio}\n", i)
			fmt.Fprintf(&v, "  - name: e%d\n    emptyDisk:\n      capacity: 1Mi\n", i)
		}
		return moreDisk(d.String(), v.String())(s)
	}, want: "spec.domain.devices.disks"},
	{name: "grace period negative", doc: replace("terminationGracePeriodSeconds: 30", "terminationGracePeriodSeconds: -5"), want: "spec.terminationGracePeriodSeconds"},

	// Cloud-init data.
	{name: "cloud-init userData over the limit", doc: replace("      userData: |\n        #!/bin/sh\n", bigUserData+"      networkData: |\n        #!/bin/sh\n"),
		want: "spec.volumes[2].cloudInitNoCloud"},
	{name: "cloud-init userDataBase64 not base64", doc: replace("      userData: |\n        #!/bin/sh\n        echo \"token bad\"\n",
		"      userDataBase64: \"!!!not base64!!!\"\n"), want: "spec.volumes[2].cloudInitNoCloud.userDataBase64"},
	{name: "cloud-init with no data", doc: replace("      userData: |\n        #!/bin/sh\n        echo \"token bad\"\n", "      {}\n"),
		want: "spec.volumes[2].cloudInitNoCloud"},

	// Devices.
	{name: "disk bus unknown", doc: replace(rootDisk, "      - name: root\n        disk: {bus: floppy}\n"), want: "spec.domain.devices.disks[0].disk.bus"},
	{name: "disk with two targets", doc: replace(rootDisk, "      - name: root\n        disk: {bus: virtio}\n        cdrom: {bus: sata}\n"), want: "spec.domain.devices.disks[0]"},
	{name: "volume with two sources", doc: replace(scratchCap, scratchCap+"    containerDisk:\n      image: x\n"), want: "spec.volumes[1]"},
	{name: "volume with no source", doc: replace("  - name: scratch\n    emptyDisk:\n      capacity: 64Mi\n", "  - name: scratch\n"), want: "spec.volumes[1]"},
	{name: "disk serial with bad characters", doc: replace(rootDisk, rootDisk+"        serial: \"a b;rm -rf\"\n"), want: "spec.domain.devices.disks[0].serial"},
	{name: "interface without a network", doc: replace("      autoattachPodInterface: false\n",
		"      autoattachPodInterface: false\n      interfaces:\n      - name: nic0\n        masquerade: {}\n"), want: "spec.domain.devices.interfaces[0]"},
	// Identity and DNS: names that reach paths, the guest's DHCP and
	// cloud-init, where a "../" or a line break would escape a directory
	// or inject a line.
	{name: "metadata.uid with ../", doc: func(s string) string {
		return regexp.MustCompile(`(?m)^  uid: .*$`).ReplaceAllString(s, "  uid: ../../escape")
	}, want: "metadata.uid", grpc: "uid"},
	{name: "hostname with a line break", doc: replace(grace, grace+"  hostname: \"vm\\nnameserver 6.6.6.6\"\n"), want: "spec.hostname"},
	{name: "hostname with a quote", doc: replace(grace, grace+"  hostname: \"vm'x\"\n"), want: "spec.hostname"},
	{name: "subdomain with a line break", doc: replace(grace, grace+"  subdomain: \"sub\\ndomain\"\n"), want: "spec.subdomain"},
	{name: "dnsConfig nameserver not an address", doc: replace(grace, grace+"  dnsPolicy: None\n  dnsConfig:\n    nameservers: [\"1.1.1.1\\nsearch evil\"]\n"),
		want: "spec.dnsConfig.nameservers[0]"},
	{name: "dnsConfig four nameservers", doc: replace(grace, grace+"  dnsConfig:\n    nameservers: [1.1.1.1, 1.0.0.1, 8.8.8.8, 8.8.4.4]\n"),
		want: "spec.dnsConfig.nameservers"},
	{name: "dnsConfig search with a line break", doc: replace(grace, grace+"  dnsConfig:\n    searches: [\"a.example\\nnameserver 6.6.6.6\"]\n"),
		want: "spec.dnsConfig.searches[0]"},
	{name: "dnsPolicy None without nameservers", doc: replace(grace, grace+"  dnsPolicy: None\n"), want: "spec.dnsConfig.nameservers"},
	{name: "annotations over 256 KiB", doc: replace("  uid: ", "  annotations:\n    big: \""+strings.Repeat("a", 257<<10)+"\"\n  uid: "),
		want: "metadata.annotations"},
	{name: "startStrategy unknown", doc: replace("  terminationGracePeriodSeconds: 30\n", "  terminationGracePeriodSeconds: 30\n  startStrategy: Later\n"), want: "spec.startStrategy"},
}
