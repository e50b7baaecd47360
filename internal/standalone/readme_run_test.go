package standalone_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/dvimport/dvtest"
	"github.com/virtlauncher/virtlauncher/internal/repo"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// readmeCloudImage returns the shell steps of the README's "Run a real
// cloud image" section and the manifest they write (between
// `cat > vm.yaml <<EOF` and `EOF`).
func readmeCloudImage(t *testing.T) (steps, manifest string) {
	t.Helper()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Run a real cloud image\n")
	if !ok {
		t.Fatal(`README.md has no "Run a real cloud image" section`)
	}
	_, steps, ok = strings.Cut(section, "\n```sh\n")
	steps, _, ok2 := strings.Cut(steps, "\n```\n")
	if !ok || !ok2 {
		t.Fatal("README.md: no sh block in the cloud image section")
	}
	_, manifest, ok = strings.Cut(steps, "cat > vm.yaml <<EOF\n")
	manifest, _, ok2 = strings.Cut(manifest, "\nEOF\n")
	if !ok || !ok2 {
		t.Fatalf("README.md: the cloud image steps write no vm.yaml:\n%s", steps)
	}
	return steps + "\n", manifest + "\n"
}

// TestVlctlReadmeCloudImage: the README's "Run a real cloud image" walk-
// through, as written but for the image's URL: a VirtualMachine with
// KubeVirt's u1.medium instancetype and debian preference, a DataVolume
// imported over HTTP and cloud-init giving the user debian an SSH key,
// run with vlctl run -d --emulation -f vm.yaml, then vlctl ssh debian.
// The image is the test guest as a disk booted by EFI firmware alone
// (vlctl testguest --efi-disk), served by a local web server; the guest
// makes the #cloud-config user with its key. The VM prints its name and
// runs with the instancetype's 4 GiB and 1 vCPU (hotpluggable to 4
// times these, as KubeVirt makes a VM's), booted by OVMF as the
// preference asks; vlctl ssh without -l logs in as debian; vlctl stop
// and rm --volumes leave nothing.
func TestVlctlReadmeCloudImage(t *testing.T) {
	needRoot(t)
	testenv.Programs(t, "ssh", "ssh-keygen", "qemu-img")
	t.Parallel()
	steps, manifest := readmeCloudImage(t)
	for _, want := range []string{"\nvlctl run -d --emulation -f vm.yaml\n", "\nvlctl ssh debian\n"} {
		if !strings.Contains(steps, want) {
			t.Fatalf("the README's steps lack %q:\n%s", strings.TrimSpace(want), steps)
		}
	}
	tmp := t.TempDir()
	key, pub := sshKeyPair(t, tmp, "vlctl-readme")
	g, err := testguest.Build(context.Background(), testguest.DefaultCacheDir())
	if err != nil {
		t.Fatalf("test guest: %v", err)
	}
	disk := filepath.Join(tmp, "disk.qcow2")
	if err := g.EFIDisk(context.Background(), disk); err != nil {
		t.Fatal(err)
	}
	image, err := os.ReadFile(disk)
	if err != nil {
		t.Fatal(err)
	}
	srv := dvtest.New(t)
	urls := regexp.MustCompile(`(?m)^( +url: )(\S+)$`)
	if n := len(urls.FindAllString(manifest, -1)); n != 1 || strings.Count(manifest, "$(cat ~/.ssh/id_ed25519.pub)") != 1 {
		t.Fatalf("the README's manifest has %d URLs and not one key from ~/.ssh/id_ed25519.pub:\n%s", n, manifest)
	}
	url := srv.Put(filepath.Base(urls.FindStringSubmatch(manifest)[2]), image)
	doc := urls.ReplaceAllString(manifest, "${1}"+url)
	// What the shell's $(cat ...) gives.
	doc = strings.Replace(doc, "$(cat ~/.ssh/id_ed25519.pub)", strings.TrimSpace(string(pub)), 1)
	file := filepath.Join(tmp, "vm.yaml")
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	records, root := workRoot(t), workRoot(t)
	// The store's volumes are opened by QEMU's user: a directory it can
	// enter, as the default one is.
	open := userDir(t, "vlreadme")
	store, cache := filepath.Join(open, "store"), filepath.Join(open, "imports")
	rd := "--record-dir=" + records
	if code, out, errOut := vlctl(t, 4*time.Minute, "run", "-d", "--emulation", "-f", file,
		"--workdir", root, rd, "--volume-store", store, "--import-cache", cache); code != 0 || out != "default/debian\n" {
		t.Fatalf("vlctl run -d --emulation -f vm.yaml: exit %d, %q: %s", code, out, errOut)
	}
	t.Cleanup(func() {
		if t.Failed() {
			_, log, _ := vlctl(t, time.Minute, "logs", "--run", rd, "debian")
			_, console, _ := vlctl(t, time.Minute, "logs", "--console", rd, "debian")
			t.Logf("the background run's log:\n%s\nthe console:\n%s", log, console)
		}
		vlctl(t, 3*time.Minute, "rm", "--force", "--volumes", rd, "--volume-store", store, "debian")
	})

	// The domain: the instancetype's memory, OVMF.
	code, out, errOut := vlctl(t, time.Minute, "get", rd, "debian", "-o", "json")
	var dom struct {
		Spec struct {
			// A VM's memory and CPUs can be hotplugged up to 4 times
			// these, as in KubeVirt: what the guest has now.
			CurrentMemory struct {
				Value uint64
				Unit  string
			}
			OS struct{ BootLoader *struct{ Path string } }
		}
		Status struct{ Status string }
	}
	if err := json.Unmarshal([]byte(out), &dom); code != 0 || err != nil {
		t.Fatalf("vlctl get debian -o json: exit %d, %v: %s%s", code, err, out, errOut)
	}
	if m := dom.Spec.CurrentMemory; m.Value<<map[string]uint{"b": 0, "KiB": 10, "MiB": 20, "GiB": 30}[m.Unit] != 4<<30 {
		t.Errorf("memory %d %s, want u1.medium's 4 GiB", m.Value, m.Unit)
	}

	if l := dom.Spec.OS.BootLoader; l == nil || !strings.Contains(l.Path, "OVMF") {
		t.Errorf("loader %+v, want OVMF (the debian preference's EFI)", l)
	}

	// vlctl ssh debian: as debian, the user cloud-init makes, without -l
	// (-i: the README's key is ssh's default one, this test's is not).
	// The guest has the instancetype's one CPU online.
	state := filepath.Join(tmp, "state")
	var sshOut, sshErr string
	for deadline := time.Now().Add(4 * time.Minute); ; time.Sleep(2 * time.Second) {
		sshOut, sshErr, code = vlctlIOEnv(t, []string{"XDG_STATE_HOME=" + state}, "", "ssh", rd, "debian",
			"-i", key, "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "--", "id -un; grep -c ^processor /proc/cpuinfo")
		// Tried again only while the guest's SSH server is not up.
		if booting := code == 255 && strings.Contains(sshErr, "Connection closed"); !booting || time.Now().After(deadline) {
			break
		}
	}
	if code != 0 || sshOut != "debian\n1\n" {
		t.Errorf("vlctl ssh debian -- 'id -un; grep -c ^processor /proc/cpuinfo': exit %d, %q: %s; want debian and 1 CPU", code, sshOut, sshErr)
	}
	_, console, _ := vlctl(t, time.Minute, "logs", "--console", rd, "debian")
	if got, _ := testguest.FindMarker(console, testguest.MarkerCloudConfigUser); got != "debian keys 1" {
		t.Errorf("the guest's cloud-config user: %q, want debian with 1 key", got)
	}
	if _, ok := testguest.FindMarker(console, testguest.MarkerEFI); !ok {
		t.Errorf("the guest did not boot by EFI; console:\n%s", console)
	}

	if code, _, errOut := vlctl(t, 3*time.Minute, "stop", rd, "debian"); code != 0 {
		t.Fatalf("vlctl stop debian: exit %d: %s", code, errOut)
	}
	if code, _, errOut := vlctl(t, time.Minute, "rm", "--volumes", rd, "--volume-store", store, "debian"); code != 0 {
		t.Errorf("vlctl rm --volumes debian: exit %d: %s", code, errOut)
	}
	checkNothingLeft(t, root)
	if _, err := os.Stat(filepath.Join(store, "default", "debian", "debian-root.img")); !os.IsNotExist(err) {
		t.Errorf("the imported volume after vlctl rm --volumes: %v", err)
	}
}
