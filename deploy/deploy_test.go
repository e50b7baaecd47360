// Package deploy holds the launcher image's Containerfile. Its tests check
// what can be checked without a container engine (none runs here): that
// every binary the image copies exists in the tree and builds static, and
// the parts of the image layout KubeVirt depends on.
package deploy

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func containerfile(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The binaries KubeVirt's pod contract needs in /usr/bin (kubevirt-wire.md 5.1).
var required = []string{"virt-launcher", "virt-launcher-monitor", "container-disk", "virt-tail", "virt-probe", "virt-freezer", "libvirt-hook-client"}

func TestContainerfileBinaries(t *testing.T) {
	cf := containerfile(t)
	built := regexp.MustCompile(`\./cmd/([a-z0-9-]+)`).FindAllStringSubmatch(cf, -1)
	var names []string
	for _, m := range built {
		names = append(names, m[1])
	}
	for _, r := range required {
		if !slices.Contains(names, r) {
			t.Errorf("Containerfile does not build %s", r)
		}
		if !strings.Contains(cf, "/out/"+r) {
			t.Errorf("Containerfile does not copy %s into the image", r)
		}
	}
	for _, n := range names {
		if _, err := os.Stat(filepath.Join("..", "cmd", n, "main.go")); err != nil {
			t.Errorf("Containerfile builds ./cmd/%s, which is not in the tree: %v", n, err)
		}
	}
	for _, want := range []string{
		"ln -s ../run /var/run", // relative, as the handler needs
		"--uid 107", "--gid 107",
		"qemu-system-x86", "qemu-utils", "libvirt-daemon", "libvirt-daemon-driver-qemu", "libvirt-clients", "ovmf", "bash", "passt",
		"procps", "nftables", "iproute2", // ps, nft, ip and bridge: KubeVirt's image has them, its suite runs them in the compute container
		"CGO_ENABLED=0",
		"/usr/bin/node-labeller.sh",
		"/out/virtiofsd /usr/libexec/virtiofsd", "./cmd/virtiofsd",
		"/out/libvirt-hook-client /etc/libvirt/hooks/qemu",
	} {
		if !strings.Contains(cf, want) {
			t.Errorf("Containerfile lacks %q", want)
		}
	}
}

// TestStaticBinaries builds the image's binaries the way the Containerfile
// does and checks that none needs a dynamic loader: container-disk runs in
// FROM-scratch disk images, and the rest must not depend on the image's libc.
func TestStaticBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds seven binaries")
	}
	out := t.TempDir()
	args := []string{"build", "-o", out + "/"}
	static := append(slices.Clone(required), "virtiofsd")
	for _, r := range static {
		args = append(args, "./cmd/"+r)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	for _, r := range static {
		f, err := elf.Open(filepath.Join(out, r))
		if err != nil {
			t.Errorf("%s: %v", r, err)
			continue
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("%s is dynamically linked (program header %v)", r, p.Type)
			}
		}
		f.Close()
	}
}

// TestContainerfileMatchesMkrootfs: the Containerfile installs every package
// deploy/mkrootfs puts in the image (`make image`), so the two builds give
// the same tree.
func TestContainerfileMatchesMkrootfs(t *testing.T) {
	b, err := os.ReadFile("mkrootfs")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)\npackages=\(\n(.*?)\n\)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("mkrootfs: no packages=( ... ) list")
	}
	pkgs := strings.Fields(string(m[1]))
	if len(pkgs) < 10 {
		t.Fatalf("mkrootfs lists %d packages: %v", len(pkgs), pkgs)
	}
	// What KubeVirt's suite runs in the compute container, in the tested
	// build too.
	for _, p := range []string{"procps", "nftables", "iproute2"} {
		if !slices.Contains(pkgs, p) {
			t.Errorf("mkrootfs does not install %s", p)
		}
	}
	cf := containerfile(t)
	for _, p := range pkgs {
		if !regexp.MustCompile(`[\s\\]` + regexp.QuoteMeta(p) + `[\s\\]`).MatchString(cf) {
			t.Errorf("Containerfile does not install %s (mkrootfs does)", p)
		}
	}
	for _, want := range []string{"--uid 64055 libvirt-qemu", "setcap cap_net_bind_service=+ep /usr/bin/virt-launcher-monitor", `ENTRYPOINT ["/usr/bin/virt-launcher"]`} {
		if !strings.Contains(cf, want) {
			t.Errorf("Containerfile lacks %q (make image has it)", want)
		}
	}
	if regexp.MustCompile(`(?m)^USER `).MatchString(cf) {
		t.Errorf("Containerfile sets a USER; make image's config has none (root), as KubeVirt's")
	}
}
