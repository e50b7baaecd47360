package kvshape

import "testing"

// The running-domain illustration of kubevirt-wire.md 3.3 (KubeVirt's own
// output, trimmed) decodes; each single mistake in it does not.
const example = `{"kind":"Domain","apiVersion":"1.2.2","ObjectMeta":{"name":"vm1","namespace":"ns1","uid":"U"},"Spec":{"Type":"kvm","Name":"ns1_vm1","CurrentMemory":{"Value":1048576,"Unit":"KiB"},"OS":{"Type":{"OS":"hvm","Arch":"x86_64","Machine":"pc-q35-rhel9.6.0"}},"Devices":{"Interfaces":[{"MAC":{"MAC":"02:00:00:00:00:01"},"Alias":{"Name":"default","UserDefined":true}}],"Disks":[{"Source":{"File":"/d/disk.qcow2"},"Target":{"Bus":"virtio","Device":"vda"},"Alias":{"Name":"rootdisk","UserDefined":true}}],"Channels":[{"Type":"unix","Target":{"Name":"org.qemu.guest_agent.0","Type":"virtio","State":"connected"}}]},"Features":{"ACPI":{}},"Metadata":{"KubeVirt":{"UID":"U","GracePeriod":{"DeletionGracePeriodSeconds":30,"DeletionTimestamp":null,"MarkedForGracefulShutdown":null}}}},"Status":{"Status":"Running","Reason":"Unknown","OSInfo":{"Name":""},"FSFreezeStatus":{"Status":""},"PanicCount":0}}`

func TestDecode(t *testing.T) {
	d, err := Decode([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	if d.ObjectMeta.Name != "vm1" || d.Spec.Metadata.KubeVirt.UID != "U" || d.Spec.Devices.Interfaces[0].MAC.MAC != "02:00:00:00:00:01" ||
		d.Spec.Devices.Disks[0].Alias.Name != "rootdisk" || d.Spec.Features.ACPI == nil || d.Status.Status != "Running" {
		t.Errorf("decoded %+v", d)
	}
}

func TestDecodeRejects(t *testing.T) {
	cases := map[string]string{
		"wrongly cased top key":   `{"spec":{}}`,
		"lower-case ObjectMeta":   `{"objectMeta":{}}`,
		"upper-case meta key":     `{"ObjectMeta":{"Name":"vm1"}}`,
		"Mac for MAC":             `{"Spec":{"Devices":{"Interfaces":[{"Mac":{"MAC":"x"}}]}}}`,
		"Uid for UID":             `{"Spec":{"Metadata":{"KubeVirt":{"Uid":"U"}}}}`,
		"unknown status key":      `{"Status":{"Status":"Running","Extra":1}}`,
		"ACPI as bool":            `{"Spec":{"Features":{"ACPI":true}}}`,
		"grace period as string":  `{"Spec":{"Metadata":{"KubeVirt":{"GracePeriod":{"DeletionGracePeriodSeconds":"30"}}}}}`,
		"timestamp not a time":    `{"ObjectMeta":{"deletionTimestamp":"yesterday"}}`,
		"PanicCount not a number": `{"Status":{"PanicCount":"0"}}`,
	}
	for name, in := range cases {
		if _, err := Decode([]byte(in)); err == nil {
			t.Errorf("%s: Decode(%s) accepted it", name, in)
		}
	}
}
