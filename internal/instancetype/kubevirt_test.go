package instancetype

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/virtlauncher/virtlauncher/internal/kubevirttool"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// kvCase and kvResult are the JSON of e2e/build/kubevirt/instancetypeapply.
type kvCase struct {
	Name         string                                  `json:"name"`
	VM           v1.VirtualMachine                       `json:"vm"`
	Instancetype *v1beta1.VirtualMachineInstancetypeSpec `json:"instancetype,omitempty"`
	Preference   *v1beta1.VirtualMachinePreferenceSpec   `json:"preference,omitempty"`
}

type kvResult struct {
	Name        string                         `json:"name"`
	Annotations map[string]string              `json:"annotations,omitempty"`
	Spec        *v1.VirtualMachineInstanceSpec `json:"spec,omitempty"`
	Conflicts   []string                       `json:"conflicts,omitempty"`
	Error       string                         `json:"error,omitempty"`
	Panic       string                         `json:"panic,omitempty"`
}

// kubevirtApply runs the cases through KubeVirt's expansion
// (instancetypeapply, in the e2e/build/kubevirt module at kubevirt.io/kubevirt
// v1.8.2).
func kubevirtApply(t *testing.T, cases []kvCase) []kvResult {
	return kubevirttool.Run[kvCase, kvResult](t, kubevirttool.Tool{Dir: "instancetypeapply", Timeout: 10 * time.Minute}, cases)
}

func mustYAML[T any](t *testing.T, s string) *T {
	t.Helper()
	var out T
	if err := yaml.UnmarshalStrict([]byte(s), &out); err != nil {
		t.Fatalf("%v in\n%s", err, s)
	}
	return &out
}

// The table's VMs: templates that leave things unset, set what
// preferences fill in, or set what instancetypes set.
var kvTemplates = map[string]string{
	"bare": `domain: {devices: {}}`,
	"devices": `
domain:
  devices:
    disks:
    - {name: a}
    - {name: b, disk: {bus: scsi}}
    - {name: c, cdrom: {}}
    - {name: d, lun: {}}
    - {name: e, disk: {}, cache: none, io: native}
    interfaces:
    - {name: default}
    - {name: sec, bridge: {}}
    - {name: other}
    inputs:
    - {name: tab, type: tablet}
    sound: {name: snd}
networks:
- {name: default, pod: {}}
- {name: sec, multus: {networkName: nx}}
- {name: other, multus: {networkName: ny}}`,
	"own-settings": `
architecture: arm64
subdomain: mine
terminationGracePeriodSeconds: 9
domain:
  machine: {type: q35}
  clock: {timezone: Europe/Paris}
  firmware: {bootloader: {bios: {}}}
  features: {apic: {enabled: false}, hyperv: {relaxed: {enabled: false}}}
  cpu: {features: [{name: pcid, policy: disable}]}
  devices:
    autoattachGraphicsDevice: false
    rng: {}
    disks: [{name: a, disk: {bus: sata}}]`,
	"memory-guest": `domain: {memory: {guest: 1Gi}, devices: {}}`,
	"cpu-set": `
nodeSelector: {a: b}
schedulerName: s
domain:
  cpu: {sockets: 2, cores: 2, model: host-model, dedicatedCpuPlacement: true}
  resources: {requests: {cpu: "1", memory: 1Gi}, limits: {cpu: "2"}}
  memory: {hugepages: {pageSize: 2Mi}}
  ioThreadsPolicy: shared
  devices: {gpus: [{name: g, deviceName: x}]}`,
}

var kvInstancetypes = map[string]string{
	"none": ``,
	"one":  `{cpu: {guest: 1}, memory: {guest: 256Mi}}`,
	"six":  `{cpu: {guest: 6, model: Haswell, maxSockets: 12}, memory: {guest: 6Gi, maxGuest: 12Gi}, annotations: {a: x}}`,
	"eight": `
cpu: {guest: 8, dedicatedCPUPlacement: true, isolateEmulatorThread: true, numa: {guestMappingPassthrough: {}}}
memory: {guest: 16Gi, hugepages: {pageSize: 2Mi}}
ioThreadsPolicy: auto
ioThreads: {supplementalPoolThreadCount: 4}
nodeSelector: {zone: a}
schedulerName: sched`,
	"overcommit": `{cpu: {guest: 4}, memory: {guest: 3Gi, overcommitPercent: 25}, gpus: [{name: g1, deviceName: nvidia}]}`,
}

var kvPreferences = map[string]string{
	"none":       ``,
	"cores":      `{cpu: {preferredCPUTopology: cores}}`,
	"threads":    `{cpu: {preferredCPUTopology: preferThreads}}`,
	"any":        `{cpu: {preferredCPUTopology: any}}`,
	"spread":     `{cpu: {preferredCPUTopology: spread}}`,
	"spread-sct": `{cpu: {preferredCPUTopology: spread, spreadOptions: {across: SocketsCoresThreads, ratio: 2}}}`,
	"spread-ct":  `{cpu: {preferredCPUTopology: spread, spreadOptions: {across: CoresThreads, ratio: 2}}}`,
	"spread-old": `{cpu: {preferredCPUTopology: preferSpread}, preferSpreadSocketToCoreRatio: 3}`,
	"devices": `
devices:
  preferredDiskBus: virtio
  preferredCdromBus: sata
  preferredLunBus: scsi
  preferredDiskBlockSize: {custom: {logical: 512, physical: 4096}}
  preferredDiskCache: writeback
  preferredDiskIO: threads
  preferredDiskDedicatedIoThread: true
  preferredInterfaceModel: e1000e
  preferredInterfaceMasquerade: {}
  preferredInputBus: virtio
  preferredInputType: tablet
  preferredSoundModel: ich9
  preferredRng: {}
  preferredTPM: {persistent: true}
  preferredAutoattachGraphicsDevice: true
  preferredAutoattachMemBalloon: false
  preferredAutoattachSerialConsole: true
  preferredUseVirtioTransitional: true
  preferredBlockMultiQueue: true
  preferredNetworkInterfaceMultiQueue: true
  preferredDisableHotplug: true`,
	"platform": `
preferredArchitecture: amd64
machine: {preferredMachineType: pc-q35-9.0}
preferredSubdomain: sub
preferredTerminationGracePeriodSeconds: 120
clock: {preferredClockOffset: {utc: {offsetSeconds: 30}}, preferredTimer: {rtc: {tickPolicy: catchup}}}
features:
  preferredAcpi: {enabled: true}
  preferredApic: {}
  preferredSmm: {}
  preferredKvm: {hidden: true}
  preferredPvspinlock: {}
  preferredHyperv: {relaxed: {}, vapic: {}, spinlocks: {spinlocks: 8191}, synictimer: {direct: {}}, vendorid: {vendorid: x}}
cpu: {preferredCPUFeatures: [{name: pcid, policy: require}, {name: vmx, policy: require}]}
annotations: {a: pref, b: pref}`,
	"firmware-efi":  `{firmware: {preferredEfi: {secureBoot: false, persistent: true}}}`,
	"firmware-old":  `{firmware: {preferredUseEfi: true, preferredUseSecureBoot: true}}`,
	"firmware-bios": `{firmware: {preferredUseBios: true, preferredUseBiosSerial: true}}`,
	"requires":      `{requirements: {cpu: {guest: 4}, memory: {guest: 4Gi}}}`,
}

// TestAgainstKubeVirt runs a table of VMs × instancetypes × preferences
// through KubeVirt's own expansion code and through ours, and wants the
// same VMI spec and annotations, or the same conflicting fields, or an
// error from both.
func TestAgainstKubeVirt(t *testing.T) {
	testenv.Slow(t, "a go build of KubeVirt's expansion (e2e/build/kubevirt/instancetypeapply)")
	var cases []kvCase
	for _, tn := range sortedKeys(kvTemplates) {
		for _, in := range sortedKeys(kvInstancetypes) {
			for _, pn := range sortedKeys(kvPreferences) {
				if in == "none" && pn == "none" {
					continue
				}
				c := kvCase{Name: tn + "/" + in + "/" + pn}
				spec := mustYAML[v1.VirtualMachineInstanceSpec](t, kvTemplates[tn])
				c.VM = v1.VirtualMachine{
					ObjectMeta: metav1.ObjectMeta{Name: "vm"},
					Spec: v1.VirtualMachineSpec{Template: &v1.VirtualMachineInstanceTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"a": "x", "b": "vm"}},
						Spec:       *spec,
					}},
				}
				if in != "none" {
					c.Instancetype = mustYAML[v1beta1.VirtualMachineInstancetypeSpec](t, kvInstancetypes[in])
					// Namespaced for some, cluster for others: both annotations.
					kind := KindClusterInstancetype
					if len(in)%2 == 0 {
						kind = KindInstancetype
					}
					c.VM.Spec.Instancetype = &v1.InstancetypeMatcher{Name: in, Kind: kind}
				}
				if pn != "none" {
					c.Preference = mustYAML[v1beta1.VirtualMachinePreferenceSpec](t, kvPreferences[pn])
					c.VM.Spec.Preference = &v1.PreferenceMatcher{Name: pn}
				}
				cases = append(cases, c)
			}
		}
	}
	theirs := kubevirtApply(t, cases)
	same, conflicts, errs, panics := 0, 0, 0, 0
	for i, c := range cases {
		kv := theirs[i]
		spec, ann, conf, err := ours(c)
		switch {
		case kv.Panic != "":
			// KubeVirt crashes here; we give the VM a CPU section to put
			// the preferred features in.
			if err != nil || spec.Domain.CPU == nil {
				t.Errorf("%s: KubeVirt panics (%s); ours: %v", c.Name, kv.Panic, err)
			}
			panics++
		case kv.Error != "" || (err != nil && len(conf) == 0):
			if kv.Error == "" || err == nil || len(conf) > 0 {
				t.Errorf("%s: KubeVirt: error %q, conflicts %v; ours: error %v", c.Name, kv.Error, kv.Conflicts, err)
				continue
			}
			errs++
		case len(kv.Conflicts) > 0 || len(conf) > 0:
			k := append([]string(nil), kv.Conflicts...)
			sort.Strings(k)
			sort.Strings(conf)
			if strings.Join(k, ",") != strings.Join(conf, ",") {
				t.Errorf("%s: conflicts: KubeVirt %v, ours %v", c.Name, k, conf)
				continue
			}
			conflicts++
		default:
			a, b := canonical(t, kv.Spec), canonical(t, spec)
			if a != b {
				t.Errorf("%s: VMI spec differs\nKubeVirt: %s\nours:     %s", c.Name, a, b)
				continue
			}
			if fmt.Sprint(kv.Annotations) != fmt.Sprint(ann) {
				t.Errorf("%s: annotations: KubeVirt %v, ours %v", c.Name, kv.Annotations, ann)
				continue
			}
			same++
		}
	}
	t.Logf("%d cases: %d VMIs the same, %d with the same conflicting fields, %d refused by both, %d where KubeVirt's code panics", len(cases), same, conflicts, errs, panics)
	if same == 0 || conflicts == 0 || errs == 0 {
		t.Errorf("the table must exercise all three outcomes")
	}
}

// ours expands a case with our code, in the steps KubeVirt takes (the
// Expander's Prepare, then Apply, with no default interface in between:
// instancetypeapply adds none either).
func ours(c kvCase) (*v1.VirtualMachineInstanceSpec, map[string]string, []string, error) {
	level := map[key]entry{}
	if m := c.VM.Spec.Instancetype; m != nil {
		level[key{m.Kind, m.Name}] = entry{origin: "table", instancetype: c.Instancetype}
	}
	if m := c.VM.Spec.Preference; m != nil {
		level[key{KindClusterPreference, m.Name}] = entry{origin: "table", preference: c.Preference}
	}
	x := Expander{Store: &Store{levels: []map[key]entry{level}}}
	vm := c.VM.DeepCopy()
	vmi := &v1.VirtualMachineInstance{ObjectMeta: *vm.Spec.Template.ObjectMeta.DeepCopy(), Spec: *vm.Spec.Template.Spec.DeepCopy()}
	if err := x.Prepare(vm, &vmi.Spec); err != nil {
		return nil, nil, nil, err
	}
	if err := x.Apply(vm, vmi); err != nil {
		var conf []string
		for _, line := range strings.Split(err.Error(), "\n") {
			if f, _, ok := strings.Cut(line, ": set by the VM and by the instancetype"); ok {
				conf = append(conf, f)
			}
		}
		return nil, nil, conf, err
	}
	return &vmi.Spec, vmi.Annotations, nil, nil
}

// canonical is a spec's JSON with the quantities in one spelling.
func canonical(t *testing.T, s *v1.VirtualMachineInstanceSpec) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
