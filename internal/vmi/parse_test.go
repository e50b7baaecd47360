package vmi

import (
	"strings"
	"testing"

	v1 "kubevirt.io/api/core/v1"
)

const minimalVMI = `apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: testvmi
spec:
  domain:
    devices:
      disks:
      - name: containerdisk
        disk:
          bus: virtio
    memory:
      guest: 128Mi
  volumes:
  - name: containerdisk
    containerDisk:
      image: quay.io/example/disk:v1
`

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr []string // substrings that must all appear; nil means success
		check   func(t *testing.T, vmi *v1.VirtualMachineInstance)
	}{
		{
			name: "minimal VMI",
			in:   minimalVMI,
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				if vmi.Name != "testvmi" || len(vmi.Spec.Domain.Devices.Disks) != 1 ||
					vmi.Spec.Domain.Devices.Disks[0].Disk.Bus != v1.DiskBusVirtio ||
					vmi.Spec.Domain.Memory.Guest.String() != "128Mi" {
					t.Errorf("decoded wrong: %+v", vmi.Spec.Domain)
				}
				if vmi.Kind != "VirtualMachineInstance" || vmi.APIVersion != "kubevirt.io/v1" {
					t.Errorf("type meta %q %q", vmi.APIVersion, vmi.Kind)
				}
			},
		},
		{
			name: "virt-handler JSON without apiVersion and kind",
			in:   `{"metadata":{"name":"a","namespace":"ns","uid":"u-1"},"spec":{"domain":{"devices":{}}},"status":{"phase":"Scheduled"}}`,
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				if vmi.Name != "a" || vmi.Namespace != "ns" || vmi.UID != "u-1" || vmi.Status.Phase != v1.Scheduled {
					t.Errorf("decoded wrong: %+v", vmi.ObjectMeta)
				}
			},
		},
		{
			name: "v1alpha3 is served",
			in:   strings.Replace(minimalVMI, "kubevirt.io/v1", "kubevirt.io/v1alpha3", 1),
		},
		{
			name: "leading separator and comment document",
			in:   "---\n# nothing here\n---\n" + minimalVMI + "---\n",
		},
		{
			name: "VM template becomes the VMI, identity from the VM",
			in: `apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: myvm
  namespace: prod
  labels: {app: x}
  annotations: {a: b}
spec:
  runStrategy: Always
  template:
    metadata:
      labels: {inner: yy}
    spec:
      domain:
        devices: {}
        memory: {guest: 64Mi}
`,
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				if vmi.Name != "myvm" || vmi.Namespace != "prod" {
					t.Errorf("identity %s/%s", vmi.Namespace, vmi.Name)
				}
				if vmi.Labels["inner"] != "yy" || vmi.Labels["app"] != "" {
					t.Errorf("template labels must win: %v", vmi.Labels)
				}
				if vmi.Annotations["a"] != "b" {
					t.Errorf("annotations should come from the VM: %v", vmi.Annotations)
				}
				if vmi.Kind != "VirtualMachineInstance" {
					t.Errorf("kind %q", vmi.Kind)
				}
			},
		},
		{
			name:    "unknown field under an inline struct",
			in:      strings.Replace(minimalVMI, "      - name: containerdisk\n        disk:", "      - name: containerdisk\n        bus: sata\n        disk:", 1),
			wantErr: []string{"spec.domain.devices.disks[0].bus: unknown field"},
		},
		{
			name:    "unknown top-level field",
			in:      minimalVMI + "foo: bar\n",
			wantErr: []string{"foo: unknown field"},
		},
		{
			name:    "field names are case-sensitive",
			in:      strings.Replace(minimalVMI, "  volumes:", "  Volumes:", 1),
			wantErr: []string{"spec.Volumes: unknown field"},
		},
		{
			name:    "unknown field inside PodNetwork (custom UnmarshalJSON)",
			in:      minimalVMI + "  networks:\n  - name: default\n    pod:\n      vmNetworkCIDRR: 10.0.0.0/24\n",
			wantErr: []string{"spec.networks[0].pod.vmNetworkCIDRR: unknown field"},
		},
		{
			name:    "string where an integer belongs",
			in:      strings.Replace(minimalVMI, "    memory:", "    cpu:\n      cores: two\n    memory:", 1),
			wantErr: []string{`spec.domain.cpu.cores: wrong type: expected integer, got string "two"`},
		},
		{
			name:    "negative unsigned",
			in:      strings.Replace(minimalVMI, "    memory:", "    cpu:\n      cores: -1\n    memory:", 1),
			wantErr: []string{"spec.domain.cpu.cores: invalid value -1"},
		},
		{
			name:    "fraction where an integer belongs",
			in:      strings.Replace(minimalVMI, "    memory:", "    cpu:\n      sockets: 1.5\n    memory:", 1),
			wantErr: []string{"spec.domain.cpu.sockets: invalid value 1.5"},
		},
		{
			name:    "object where a list belongs",
			in:      strings.Replace(minimalVMI, "  volumes:\n", "  volumes:\n    name: x\n  xvolumes:\n", 1),
			wantErr: []string{"spec.volumes: wrong type: expected list, got object"},
		},
		{
			name:    "quantity that does not parse",
			in:      strings.Replace(minimalVMI, "guest: 128Mi", "guest: 12XB", 1),
			wantErr: []string{"spec.domain.memory.guest: invalid value", "quantities must match"},
		},
		{
			name:    "quantity with a hostile exponent",
			in:      strings.Replace(minimalVMI, "guest: 128Mi", "guest: 1e9000000000000000000", 1),
			wantErr: []string{`spec.domain.memory.guest: quantity "1e9000000000000000000": exponent beyond ±30`},
		},
		{
			name:    "quantity with an exponent beyond int64",
			in:      strings.Replace(minimalVMI, "guest: 128Mi", "guest: 1e99999999999999999999", 1),
			wantErr: []string{`spec.domain.memory.guest: quantity "1e99999999999999999999": exponent beyond ±30`},
		},
		{
			name: "exa suffixes are not exponents",
			in:   strings.Replace(minimalVMI, "guest: 128Mi", "guest: 1Ei", 1),
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				if vmi.Spec.Domain.Memory.Guest.String() != "1Ei" {
					t.Errorf("guest %v", vmi.Spec.Domain.Memory.Guest)
				}
			},
		},
		{
			name:    "quantity of the wrong type",
			in:      strings.Replace(minimalVMI, "guest: 128Mi", "guest: [1]", 1),
			wantErr: []string{"spec.domain.memory.guest: wrong type: expected a quantity such as 1Gi or 500m, got list"},
		},
		{
			name: "quantity as a JSON number",
			in:   `{"metadata":{"name":"a"},"spec":{"domain":{"devices":{},"memory":{"guest":1073741824}}}}`,
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				if vmi.Spec.Domain.Memory.Guest.Value() != 1<<30 {
					t.Errorf("guest %v", vmi.Spec.Domain.Memory.Guest)
				}
			},
		},
		{
			name:    "timestamp that does not parse (leaf UnmarshalJSON)",
			in:      strings.Replace(minimalVMI, "  name: testvmi\n", "  name: testvmi\n  creationTimestamp: yesterday\n", 1),
			wantErr: []string{`metadata.creationTimestamp: invalid value "yesterday"`},
		},
		{
			name: "null timestamp, as kubectl writes it",
			in:   strings.Replace(minimalVMI, "  name: testvmi\n", "  name: testvmi\n  creationTimestamp: null\n", 1),
		},
		{
			name:    "int-or-string given an object",
			in:      minimalVMI + "  readinessProbe:\n    httpGet:\n      port: {a: 1}\n",
			wantErr: []string{`spec.readinessProbe.httpGet.port: invalid value {"a":1}`},
		},
		{
			name: "int-or-string as a name",
			in:   minimalVMI + "  readinessProbe:\n    httpGet:\n      port: http\n",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				if vmi.Spec.ReadinessProbe.HTTPGet.Port.StrVal != "http" {
					t.Errorf("port %+v", vmi.Spec.ReadinessProbe.HTTPGet.Port)
				}
			},
		},
		{
			name:    "label value of the wrong type",
			in:      strings.Replace(minimalVMI, "  name: testvmi\n", "  name: testvmi\n  labels:\n    tier: 3\n", 1),
			wantErr: []string{"metadata.labels[tier]: wrong type: expected string, got number 3 (quote the value in YAML)"},
		},
		{
			name:    "YAML 1.1 boolean where a string belongs",
			in:      strings.Replace(minimalVMI, "  name: testvmi\n", "  name: testvmi\n  labels:\n    enabled: on\n", 1),
			wantErr: []string{"metadata.labels[enabled]: wrong type: expected string, got boolean true (quote the value in YAML)"},
		},
		{
			name:    "several errors are all reported",
			in:      minimalVMI + "foo: 1\nbar: 2\n",
			wantErr: []string{"foo: unknown field", "bar: unknown field"},
		},
		{
			name:    "duplicate key in JSON",
			in:      `{"metadata":{"name":"a"},"metadata":{"name":"b"}}`,
			wantErr: []string{"metadata: duplicate field"},
		},
		{
			name:    "duplicate key in YAML",
			in:      strings.Replace(minimalVMI, "  name: testvmi\n", "  name: testvmi\n  name: other\n", 1),
			wantErr: []string{`"name" already set`},
		},
		{
			name:    "another kind",
			in:      "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n",
			wantErr: []string{`kind: "Pod" (apiVersion "v1") is not supported`},
		},
		{
			name:    "a KubeVirt kind we do not run",
			in:      "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstanceReplicaSet\nmetadata: {name: p}\n",
			wantErr: []string{`kind: "VirtualMachineInstanceReplicaSet"`},
		},
		{
			name:    "VMI kind from another group",
			in:      strings.Replace(minimalVMI, "kubevirt.io/v1", "example.com/v1", 1),
			wantErr: []string{`kind: VirtualMachineInstance of apiVersion "example.com/v1" is not supported`},
		},
		{
			name:    "apiVersion without kind",
			in:      "apiVersion: kubevirt.io/v1\nmetadata: {name: p}\n",
			wantErr: []string{"kind: required when apiVersion"},
		},
		{
			name:    "kind of the wrong type",
			in:      "kind: 5\n",
			wantErr: []string{"kind: wrong type: expected string, got number 5"},
		},
		{
			name:    "two objects",
			in:      minimalVMI + "---\n" + minimalVMI,
			wantErr: []string{"manifest holds 2 objects"},
		},
		{
			name:    "empty input",
			in:      "  \n",
			wantErr: []string{"manifest is empty"},
		},
		{
			name:    "only comments",
			in:      "# hello\n---\n",
			wantErr: []string{"manifest holds no object"},
		},
		{
			name:    "a list, not an object",
			in:      "- a\n- b\n",
			wantErr: []string{"manifest is a list, not an object"},
		},
		{
			name:    "broken YAML",
			in:      "metadata:\n  name: [a\n",
			wantErr: []string{"YAML document 1"},
		},
		{
			name:    "broken JSON object falls back to YAML and is reported",
			in:      `{"metadata": {"name": "a"}`,
			wantErr: []string{"YAML document 1"},
		},
		{
			name:    "VM with instancetype",
			in:      "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata: {name: v}\nspec:\n  instancetype: {name: u1.small}\n  template: {spec: {domain: {devices: {}}}}\n",
			wantErr: []string{"spec.instancetype: instancetypes are expanded by a KubeVirt cluster (virt-api); expand it first"},
		},
		{
			name:    "VM with preference",
			in:      "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata: {name: v}\nspec:\n  preference: {name: fedora}\n  template: {spec: {domain: {devices: {}}}}\n",
			wantErr: []string{"spec.preference: preferences are expanded by a KubeVirt cluster (virt-api); expand it first"},
		},
		{
			name:    "VM without template",
			in:      "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata: {name: v}\nspec: {runStrategy: Always}\n",
			wantErr: []string{"spec.template: required"},
		},
		{
			name:    "VM paths start at the VM",
			in:      "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata: {name: v}\nspec:\n  template: {spec: {domain: {devices: {}, cpuu: {}}}}\n",
			wantErr: []string{"spec.template.spec.domain.cpuu: unknown field"},
		},
		{
			name:    "nesting bomb",
			in:      `{"metadata":` + strings.Repeat(`{"a":`, 500) + `1` + strings.Repeat("}", 501),
			wantErr: []string{"nested deeper than 128 levels"},
		},
		{
			name:    "too large",
			in:      strings.Repeat(" ", MaxManifestBytes+1),
			wantErr: []string{"more than the"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vmi, err := Parse([]byte(tc.in))
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if tc.check != nil {
					tc.check(t, vmi)
				}
				return
			}
			if err == nil {
				t.Fatalf("want error containing %q, got none", tc.wantErr)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestParseErrorsAreFieldErrors(t *testing.T) {
	_, err := Parse([]byte(minimalVMI + "foo: 1\nspec2: 2\n"))
	fes := FieldErrors(err)
	if len(fes) != 2 || fes[0].Path != "foo" || fes[1].Path != "spec2" || fes[0].Reason != "unknown field" {
		t.Fatalf("FieldErrors = %v (from %v)", fes, err)
	}
}

func TestParseLenient(t *testing.T) {
	// Fields a newer KubeVirt might send are dropped and reported.
	in := `{"metadata":{"name":"a","futureMeta":1},"spec":{"domain":{"devices":{"futureDevice":{}},"memory":{"guest":"1Gi"}},"futureSpec":true},` +
		`"Spec":{"domain":{"memory":{"guest":"2Gi"}}},"status":{"futureStatus":"x"}}`
	vmi, ignored, err := ParseLenient([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "ignored", ignored, []string{"metadata.futureMeta", "spec.domain.devices.futureDevice", "spec.futureSpec", "Spec", "status.futureStatus"})
	// "Spec" must not reach encoding/json's case-insensitive matching.
	eq(t, "guest", vmi.Spec.Domain.Memory.Guest.String(), "1Gi")
	if _, err := Parse([]byte(in)); err == nil {
		t.Error("strict Parse accepted unknown fields")
	}

	// Wrong types and hostile quantities are still errors.
	for in, want := range map[string]string{
		`{"spec":{"domain":{"cpu":{"cores":"2"}}}}`:                "spec.domain.cpu.cores: wrong type",
		`{"spec":{"domain":{"memory":{"guest":"1e99999999999"}}}}`: "spec.domain.memory.guest: quantity",
		`{"spec":{},"spec":{}}`:                                    "spec: duplicate field",
	} {
		if _, _, err := ParseLenient([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseLenient(%s) = %v, want %q", in, err, want)
		}
	}
}
