package reliability

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	podproc "github.com/virtlauncher/virtlauncher/internal/pod"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

const badUID = "6d1f0f5e-5b1a-4b8e-9a57-0d7f3c1e2b44"

func goodDoc(uid string) string {
	return launchertest.VMIYAML(launchertest.VMISpec{Name: "bad", Namespace: "default", UID: uid, Token: "bad"})
}

// TestBadInputCasesAreBad guards the table: the good VMI loads, and every
// row changes it.
func TestBadInputCasesAreBad(t *testing.T) {
	good := goodDoc(badUID)
	if _, err := vmi.Load([]byte(good), vmi.Options{}); err != nil {
		t.Fatalf("the good test VMI does not load: %v", err)
	}
	if len(badCases) < 40 {
		t.Errorf("%d bad-input cases, want at least 40", len(badCases))
	}
	for _, c := range badCases {
		if c.doc(good) == good {
			t.Errorf("%s: the row does not change the VMI", c.name)
		}
	}
}

// TestBadInputLoad: vmi.Load refuses every row with an error naming the
// field.
func TestBadInputLoad(t *testing.T) {
	good := goodDoc(badUID)
	for _, c := range badCases {
		t.Run(c.name, func(t *testing.T) {
			if c.knownBug != "" {
				t.Skip("known bug: " + c.knownBug)
			}
			v, err := vmi.Load([]byte(c.doc(good)), vmi.Options{})
			if err == nil {
				t.Fatalf("loaded: %+v", v.ObjectMeta)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not name %q", err, c.want)
			}
		})
	}
}

// TestBadInputVlctl: `vlctl convert` and `vlctl run` exit 1 with one line
// naming the field, print nothing on stdout and create nothing.
func TestBadInputVlctl(t *testing.T) {
	env.NeedBinaries(t)
	good := goodDoc(badUID)
	in := t.TempDir()
	// Short (libvirt's socket paths below it must fit in 107 bytes), and
	// open to the launcher user.
	work := fmt.Sprintf("/run/r%04x", os.Getpid()&0xffff)
	launchertest.Must(t, os.Mkdir(work, 0o755))
	defer os.RemoveAll(work)
	launchertest.Must(t, os.Chmod(work, 0o755))
	tablesBefore := nftTables(t)
	var multiLine []string
	for i, c := range badCases {
		if c.knownBug != "" {
			continue
		}
		file := filepath.Join(in, fmt.Sprintf("case%02d.yaml", i))
		launchertest.Must(t, os.WriteFile(file, []byte(c.doc(good)), 0o644))
		for _, verb := range []string{"convert", "run"} {
			args := []string{verb, file}
			if verb == "run" {
				args = []string{"run", "--emulation", "--workdir", work, "--qemu-timeout", "10s", file}
			}
			cmd := exec.Command(filepath.Join(env.BinDir, "vlctl"), args...)
			var stdout, stderr testenv.SyncBuffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			done := make(chan error, 1)
			launchertest.Must(t, cmd.Start())
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(60 * time.Second):
				cmd.Process.Kill()
				<-done
				t.Fatalf("%s/%s: vlctl did not return within 60 s", c.name, verb)
			}
			if code := cmd.ProcessState.ExitCode(); code != 1 {
				t.Errorf("%s/%s: exit %d (%v), want 1; stderr %q", c.name, verb, code, err, stderr.String())
			}
			msg := strings.TrimSuffix(stderr.String(), "\n")
			if strings.Contains(msg, "\n") {
				if verb == "run" {
					multiLine = append(multiLine, c.name)
				} else {
					t.Errorf("%s/%s: error is not one line:\n%s", c.name, verb, msg)
				}
			}
			if !strings.Contains(msg, c.want) || !strings.HasPrefix(msg, "vlctl: ") {
				t.Errorf("%s/%s: error %q does not name %q", c.name, verb, launchertest.Tail(msg, 300), c.want)
			}
			if stdout.String() != "" {
				t.Errorf("%s/%s: printed %q on stdout", c.name, verb, launchertest.Tail(stdout.String(), 200))
			}
		}
		if ents, _ := os.ReadDir(work); len(ents) > 0 {
			t.Fatalf("%s: vlctl run left %v in its work root", c.name, ents)
		}
	}
	// vlctl run with a containerDisk image (a local path standalone) that
	// is missing or not an acceptable disk image.
	fixDir, err := os.MkdirTemp("", "vlrfix")
	launchertest.Must(t, err)
	defer os.RemoveAll(fixDir)
	kernelDir := "registry.example/testguest-kernel:v1"
	if env.Guest != nil {
		// A usable kernel, so that the run gets as far as the launcher's
		// own image checks.
		kernelDir = env.Guest.KernelDir
	}
	for i, fx := range append(diskFixtures(t, fixDir), diskFixture{name: "relative path", want: "absolute"}) {
		img := filepath.Join(fixDir, fmt.Sprintf("img%d", i))
		if fx.make != nil {
			fx.make(img)
		}
		if fx.name == "relative path" {
			img = "./disks/root.img" // with ./: a path, never looked up in a registry
		}
		file := filepath.Join(in, fmt.Sprintf("image%02d.yaml", i))
		doc := replace("image: registry.example/testguest-root:v1", "image: "+img)(good)
		doc = replace("image: registry.example/testguest-kernel:v1", "image: "+kernelDir)(doc)
		launchertest.Must(t, os.WriteFile(file, []byte(doc), 0o644))
		cmd := exec.Command(filepath.Join(env.BinDir, "vlctl"), "run", "--emulation", "--quiet", "--workdir", work, "--qemu-timeout", "30s",
			"--bin-dir", env.BinDir, file)
		var stdout, stderr testenv.SyncBuffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		// With --quiet the error is the first line; after a launcher failure vlctl adds
		// the launcher's last log lines.
		msg, _, _ := strings.Cut(stderr.String(), "\n")
		if !strings.HasPrefix(msg, "vlctl: ") {
			t.Errorf("image %s: first line of stderr is not vlctl's error: %q", fx.name, launchertest.Tail(stderr.String(), 300))
		}
		if code := cmd.ProcessState.ExitCode(); code != 1 {
			t.Errorf("image %s: exit %d (%v), want 1; stderr %q", fx.name, code, err, msg)
		}
		if !strings.Contains(msg, "volumes[0]") && !strings.Contains(msg, img) && !strings.Contains(msg, "disk_0.img") {
			t.Errorf("image %s: error %q names neither the volume nor the image", fx.name, launchertest.Tail(msg, 300))
		}
		if !strings.Contains(strings.ToLower(msg), fx.want) && fx.want != "disk_3.img" {
			t.Errorf("image %s: error %q does not say %q", fx.name, launchertest.Tail(msg, 300), fx.want)
		}
		if ents, _ := os.ReadDir(work); len(ents) > 0 {
			t.Fatalf("image %s: vlctl run left %v in its work root", fx.name, ents)
		}
		if left := podproc.Under(work)(); len(left) > 0 {
			t.Fatalf("image %s: vlctl run left processes %v", fx.name, left)
		}
		t.Logf("image %s: %s", fx.name, launchertest.Tail(msg, 200))
	}
	if after := nftTables(t); after != tablesBefore {
		t.Errorf("nft tables of the root namespace changed:\nbefore %s\nafter  %s", tablesBefore, after)
	}
	if len(multiLine) > 0 {
		t.Errorf("vlctl run printed a multi-line error for %d cases: %v", len(multiLine), multiLine)
	}
}

// nftTables lists the root namespace's nftables tables (virtlauncher only
// ever adds rules inside pod namespaces).
func nftTables(t *testing.T) string {
	out, err := exec.Command("nft", "list", "tables").CombinedOutput()
	if err != nil {
		t.Logf("nft list tables: %v %s", err, out)
	}
	return string(out)
}

// TestBadInputGRPC sends every row (as JSON, the way virt-handler would)
// to a real launcher that has no domain yet: each Sync fails with a
// non-empty message naming the field, and nothing is created: no domain,
// no file, no socket. Then the good VMI boots, and a Sync of another VMI
// UID and an oversized message are refused without disturbing it.
func TestBadInputGRPC(t *testing.T) {
	t.Parallel()
	p := newPod(t, "bad", podOpts{})
	p.WaitReady(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	raw := cmdv1.NewCmdClient(c.Conn())
	good := goodDoc(p.UID)
	before := podFiles(p)

	sync := func(name string, vmiJSON []byte, opts *cmdv1.VirtualMachineOptions) (*cmdv1.Response, error) {
		cctx, cancel := context.WithTimeout(ctx, cmdclient.LongTimeout)
		defer cancel()
		return raw.SyncVirtualMachine(cctx, &cmdv1.VMIRequest{Vmi: &cmdv1.VMI{VmiJson: vmiJSON}, Options: opts})
	}
	check := func(name, want string, resp *cmdv1.Response, err error) {
		t.Helper()
		switch {
		case err != nil:
			t.Errorf("%s: gRPC error %v, want success=false", name, err)
		case resp.Success:
			t.Errorf("%s: Sync succeeded", name)
		case resp.Message == "":
			t.Errorf("%s: success=false with an empty message", name)
		case !strings.Contains(resp.Message, want):
			t.Errorf("%s: message %q does not name %q", name, launchertest.Tail(resp.Message, 400), want)
		}
		if d, exists, err := c.GetDomain(ctx); err != nil || exists {
			t.Fatalf("%s: after the refused Sync: domain exists=%v (%v) err=%v", name, exists, d, err)
		}
		if diff := diffFiles(before, podFiles(p)); diff != "" {
			t.Fatalf("%s: the refused Sync left files behind:\n%s", name, diff)
		}
	}

	tried := 0
	for _, bc := range badCases {
		want := bc.grpc
		switch {
		case want == "-" || bc.knownBug != "":
			continue
		case want == "":
			want = bc.want
		}
		doc := bc.doc(good)
		js, err := yaml.YAMLToJSONStrict([]byte(doc))
		if err != nil || strings.Contains(doc, "\n---\n") {
			// Not YAML (or with duplicate keys), or a stream YAMLToJSON would cut to its first
			// document: sent as it is.
			js = []byte(doc)
		}
		resp, err := sync(bc.name, js, nil)
		check(bc.name, want, resp, err)
		tried++
	}
	// Requests only gRPC can carry.
	extra := []struct {
		name, want string
		json       []byte
		opts       *cmdv1.VirtualMachineOptions
	}{
		{"no vmi json", cmdserverInvalid, nil, nil},
		{"vmi json not JSON", cmdserverInvalid, []byte("{not json"), nil},
		{"vmi json a list", cmdserverInvalid, []byte("[1,2]"), nil},
		{"vmi json wrong type", cmdserverInvalid, []byte(`{"metadata":{"name":5}}`), nil},
		{"domain-mutation plugins", "options.pluginsJson", mustJSON(t, good), &cmdv1.VirtualMachineOptions{PluginsJson: []byte(`[{"name":"x"}]`)}},
		{"pluginsJson not JSON", "options.pluginsJson", mustJSON(t, good), &cmdv1.VirtualMachineOptions{PluginsJson: []byte(`{`)}},
		{"another VMI uid", "uid", mustJSON(t, strings.Replace(good, p.UID, badUID, 1)), nil},
		{"another VMI name", "refusing", mustJSON(t, strings.Replace(good, "name: bad\n", "name: other\n", 1)), nil},
		{"no name", "metadata.name", mustJSON(t, strings.Replace(good, "name: bad\n", "name: \"\"\n", 1)), nil},
	}
	for _, e := range extra {
		resp, err := sync(e.name, e.json, e.opts)
		check(e.name, e.want, resp, err)
		tried++
	}
	// Container disk images that are missing or not acceptable disk
	// images: a fourth volume whose disk_3.img the test places first.
	extraDisk := moreDisk("      - name: extra\n        disk: {bus: virtio}\n",
		"  - name: extra\n    containerDisk:\n      image: registry.example/extra:v1\n")(good)
	img := p.Layout.ContainerDiskImage(3)
	for _, fx := range diskFixtures(t, t.TempDir()) {
		os.RemoveAll(img)
		if fx.make != nil {
			fx.make(img)
		}
		before := podFiles(p)
		resp, err := sync(fx.name, mustJSON(t, extraDisk), nil)
		check2 := func() {
			if diff := diffFiles(before, podFiles(p)); diff != "" {
				t.Fatalf("containerDisk %s: the refused Sync left files behind:\n%s", fx.name, diff)
			}
		}
		switch {
		case err != nil:
			t.Errorf("containerDisk %s: gRPC error %v", fx.name, err)
		case resp.Success:
			t.Fatalf("containerDisk %s: Sync succeeded", fx.name)
		case !strings.Contains(resp.Message, "disk_3.img") || !strings.Contains(resp.Message, fx.want):
			if !(fx.name == "missing" && strings.Contains(resp.Message, "does not exist")) {
				t.Errorf("containerDisk %s: message %q does not name disk_3.img and %q", fx.name, launchertest.Tail(resp.Message, 400), fx.want)
			}
		}
		check2()
		if _, exists, _ := c.GetDomain(ctx); exists {
			t.Fatalf("containerDisk %s: a domain was defined", fx.name)
		}
		tried++
	}
	os.RemoveAll(img)
	t.Logf("%d bad Syncs refused over gRPC, nothing created", tried)

	// The good VMI boots; then another UID is refused and an oversized
	// message is rejected, and the guest is untouched.
	p.boot(ctx, c)
	qpid := p.QemuPid()
	resp, err := sync("another VMI uid while running", mustJSON(t, strings.Replace(good, p.UID, badUID, 1)), nil)
	if err != nil || resp.Success || !strings.Contains(resp.Message, "uid") {
		t.Errorf("Sync of another uid while running: %v %v", resp, err)
	}
	big := mustJSON(t, strings.Replace(good, "echo \"token bad\"", "# "+strings.Repeat("x", 5<<20), 1))
	resp, err = sync("oversized", big, nil)
	if err == nil || !strings.Contains(err.Error(), "ResourceExhausted") {
		t.Errorf("Sync of a %d-byte message: resp %v err %v, want ResourceExhausted", len(big), resp, err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Errorf("Ping after the oversized message: %v", err)
	}
	if d, exists, err := c.GetDomain(ctx); err != nil || !exists || d.Status.Status != "Running" || p.QemuPid() != qpid {
		t.Errorf("guest disturbed by refused Syncs: exists=%v err=%v", exists, err)
	}
	if strings.Count(p.Console(), "VL-BOOTED") != 1 {
		t.Errorf("guest rebooted")
	}
}

// diskFixture is a file placed where a container disk image goes.
type diskFixture struct {
	name, want string
	make       func(path string) // nil: the file is missing
}

// diskFixtures makes images that must be refused; dir holds what they
// point at.
func diskFixtures(t *testing.T, dir string) []diskFixture {
	launchertest.Must(t, os.Chmod(dir, 0o755))
	backing := filepath.Join(dir, "backing.raw")
	launchertest.Must(t, os.WriteFile(backing, make([]byte, 1<<20), 0o644))
	qemuImg := func(size string, args ...string) func(string) {
		return func(path string) {
			a := append(append([]string{"create", "-q"}, args...), path)
			if size != "" {
				a = append(a, size)
			}
			out, err := exec.Command("qemu-img", a...).CombinedOutput()
			if err != nil {
				t.Fatalf("qemu-img create %v: %v %s", args, err, out)
			}
			os.Chmod(path, 0o444)
		}
	}
	return []diskFixture{
		{name: "missing", want: "no such file"},
		{name: "a directory", want: "disk_3.img", make: func(p string) { launchertest.Must(t, os.Mkdir(p, 0o755)) }},
		{name: "qcow2 with a backing file", want: "backing file", make: func(p string) {
			qemuImg("", "-f", "qcow2", "-b", backing, "-F", "raw")(p)
		}},
		{name: "qcow2 with an external data file", want: "data file", make: func(p string) {
			os.Remove(filepath.Join(dir, "data.raw"))
			qemuImg("1M", "-f", "qcow2", "-o", "data_file="+filepath.Join(dir, "data.raw"))(p)
		}},
		{name: "vmdk", want: "vmdk", make: qemuImg("1M", "-f", "vmdk")},
		{name: "symlink to a file the launcher cannot read", want: "disk_3.img", make: func(p string) { launchertest.Must(t, os.Symlink("/etc/shadow", p)) }},
	}
}

// cmdserverInvalid is KubeVirt's message for a VMI that does not decode.
const cmdserverInvalid = "No valid vmi object present in command server request"

func mustJSON(t *testing.T, doc string) []byte {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(doc))
	launchertest.Must(t, err)
	return js
}

// podFiles lists the pod directory's files and sockets, leaving out the
// daemons' own state (which changes as they run).
func podFiles(p *pod) map[string]bool {
	skip := []string{
		filepath.Join(p.Layout.PrivateDir, "libvirt"),
		filepath.Join(p.Layout.LibvirtRunDir, "libvirt"),
		p.Layout.LibvirtRunDir + "/virtlogd",
	}
	out := map[string]bool{}
	filepath.Walk(p.Dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		for _, s := range skip {
			if strings.HasPrefix(path, s) {
				return nil
			}
		}
		if !fi.IsDir() && !strings.HasSuffix(path, ".log") {
			out[path] = true
		}
		return nil
	})
	return out
}

func diffFiles(before, after map[string]bool) string {
	var d []string
	for f := range after {
		if !before[f] {
			d = append(d, "+ "+f)
		}
	}
	for f := range before {
		if !after[f] {
			d = append(d, "- "+f)
		}
	}
	sort.Strings(d)
	return strings.Join(d, "\n")
}
