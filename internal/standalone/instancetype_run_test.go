package standalone_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// itVM is what `virtctl create vm --instancetype u1.2xmedium --preference
// ubuntu --volume-containerdisk ... --cloud-init-user-data-secret ...`
// writes, with the test guest's kernel and disk: no CPU, memory or buses
// of its own. Its cloud-init user data and a config disk come from the
// second file's Secret and ConfigMap.
const itVM = `apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: itvm
spec:
  instancetype:
    name: u1.2xmedium
  preference:
    name: ubuntu
  runStrategy: Once
  template:
    spec:
      terminationGracePeriodSeconds: 10
      domain:
        firmware:
          kernelBoot:
            kernelArgs: "console=ttyS0 quiet panic=-1 no_timer_check vl.poweroff=1 vl.nodhcp=1"
            container:
              image: KERNELDIR
              kernelPath: /vmlinuz
              initrdPath: /initrd.img
        devices:
          autoattachPodInterface: false
          disks:
          - name: rootdisk
            disk: {}
          - name: cloudinit
            disk: {}
          - name: app
            disk: {}
      volumes:
      - name: rootdisk
        containerDisk:
          image: ROOTDISK
      - name: cloudinit
        cloudInitNoCloud:
          secretRef:
            name: itvm-userdata
      - name: app
        configMap:
          name: app-config
`

// itDocs are the Secret (user data that reports the guest's CPUs and
// memory) and the ConfigMap.
const itDocs = `apiVersion: v1
kind: Secret
metadata:
  name: itvm-userdata
stringData:
  userdata: |
    #!/bin/sh
    echo "VL-IT cpus=$(grep -c ^processor /proc/cpuinfo) memkb=$(awk '/^MemTotal/ {print $2}' /proc/meminfo) cmdline-disks=$(ls /sys/block | grep -c ^vd)"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: app-config
data:
  app.conf: "mode=test\n"
`

// TestVlctlRunInstancetype boots VMs that name a common instancetype and
// preference, their Secret and ConfigMap in a second file (-f): the guest
// sees the instancetype's vCPUs and 4Gi, the preference's virtio disks
// (vda, vdb, vdc: the three disks had no bus), and the user data from the
// Secret runs. u1.medium with fedora is virtctl's own example: fedora
// prefers EFI with secure boot and SMM, so the guest boots by OVMF (the
// EFI-stub kernel).
func TestVlctlRunInstancetype(t *testing.T) {
	needRoot(t)
	g, err := testguest.Build(context.Background(), testguest.DefaultCacheDir())
	if err != nil {
		t.Fatalf("test guest: %v", err)
	}
	for _, tc := range []struct {
		instancetype, preference, kernel string
		cpus                             int
		efi                              bool
	}{
		{"u1.2xmedium", "ubuntu", "/vmlinuz", 2, false},
		{"u1.medium", "fedora", "/" + testguest.EFIKernelName, 1, true},
	} {
		t.Run(tc.instancetype+"/"+tc.preference, func(t *testing.T) {
			dir := t.TempDir()
			vm, docs := filepath.Join(dir, "vm.yaml"), filepath.Join(dir, "docs.yaml")
			body := strings.NewReplacer("KERNELDIR", g.KernelDir, "ROOTDISK", g.RootDisk, "u1.2xmedium", tc.instancetype,
				"name: ubuntu", "name: "+tc.preference, "kernelPath: /vmlinuz", "kernelPath: "+tc.kernel).Replace(itVM)
			if err := os.WriteFile(vm, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(docs, []byte(itDocs), 0o644); err != nil {
				t.Fatal(err)
			}
			root := workRoot(t)
			start := time.Now()
			code, stdout, stderr := vlctl(t, 5*time.Minute, "run", "--emulation", "--workdir", root, "--record-dir", workRoot(t), "-f", vm, "-f", docs)
			t.Logf("vlctl run took %s", time.Since(start).Round(time.Millisecond))
			if code != 0 {
				t.Fatalf("exit status %d, want 0; stderr:\n%s\nconsole:\n%s", code, stderr, stdout)
			}
			console := strings.ReplaceAll(stdout, "\r\n", "\n")
			m := regexp.MustCompile(`\nVL-IT cpus=(\d+) memkb=(\d+) cmdline-disks=(\d+)`).FindStringSubmatch(console)
			if m == nil {
				t.Fatalf("the Secret's user data did not run; console:\n%s", console)
			}
			t.Logf("guest: %s", strings.TrimSpace(m[0]))
			cpus, _ := strconv.Atoi(m[1])
			memKB, _ := strconv.Atoi(m[2])
			disks, _ := strconv.Atoi(m[3])
			// MemTotal is the guest's 4Gi less what the kernel (and, by EFI,
			// the firmware) keeps for itself.
			if cpus != tc.cpus || memKB < 3800*1024 || memKB > 4096*1024 || disks != 3 {
				t.Errorf("guest has %d CPUs, %d kB (%.2f GiB), %d virtio disks; want %s's %d CPUs and 4Gi, %s's virtio bus for all 3 disks",
					cpus, memKB, float64(memKB)/(1<<20), disks, tc.instancetype, tc.cpus, tc.preference)
			}
			if _, ok := testguest.FindMarker(console, testguest.MarkerEFI); ok != tc.efi {
				t.Errorf("booted by EFI: %v, want %v", ok, tc.efi)
			}
			if !strings.Contains(console, testguest.MarkerPowerOff) {
				t.Errorf("guest did not power off; console:\n%s", console)
			}
			checkNothingLeft(t, root)
		})
	}
}

// TestVlctlRunManifestErrors: a missing instancetype, a conflict and a
// missing ConfigMap are refused with one line naming the field, and
// nothing is made.
func TestVlctlRunManifestErrors(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	base := strings.NewReplacer("KERNELDIR", "/nonexistent", "ROOTDISK", "/nonexistent.img").Replace(itVM)
	docs := write("docs.yaml", itDocs)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"missing instancetype", []string{"-f", write("a.yaml", strings.Replace(base, "u1.2xmedium", "u1.huge", 1)), "-f", docs},
			[]string{`spec.instancetype.name: VirtualMachineClusterInstancetype "u1.huge" not found`}},
		{"conflict", []string{"-f", write("b.yaml", strings.Replace(base, "        devices:\n", "        memory: {guest: 3Gi}\n        devices:\n", 1)), "-f", docs},
			[]string{"spec.template.spec.domain.memory.guest: set by the VM and by the instancetype"}},
		{"missing ConfigMap", []string{write("c.yaml", base)},
			[]string{`spec.volumes[2].configMap.name: ConfigMap "app-config" is not among the documents`}},
		{"two VMs", []string{write("d.yaml", base), "-f", write("e.yaml", base)},
			[]string{"the documents hold 2 objects that are VMs"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := workRoot(t)
			code, stdout, stderr := vlctl(t, time.Minute, append([]string{"run", "--workdir", root, "--record-dir", workRoot(t)}, tc.args...)...)
			if code != 1 || stdout != "" {
				t.Errorf("exit %d, stdout %q; want 1 and nothing", code, stdout)
			}
			oneLineError(t, stderr, tc.want...)
			checkNothingLeft(t, root)
		})
	}
}
