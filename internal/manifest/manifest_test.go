package manifest

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func write(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const vmDoc = `apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata: {name: vm1}
spec: {}
`

const cmDoc = `apiVersion: v1
kind: ConfigMap
metadata: {name: app}
data:
  app.conf: "x=1\n"
binaryData:
  blob: AAEC
`

// "c2VjcmV0" is base64 for "secret"; stringData's "pw" wins over data's.
const secretDoc = `apiVersion: v1
kind: Secret
metadata: {name: creds}
data:
  user: c2VjcmV0
  pw: b2xk
stringData:
  pw: new
`

func TestReadSeveralFilesAndDocuments(t *testing.T) {
	a := write(t, "a.yaml", "---\n"+vmDoc+"---\n"+cmDoc)
	b := write(t, "b.yaml", secretDoc)
	s, err := Read([]string{a, b}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Main.Kind != KindVM || s.Main.Name != "vm1" || s.Main.Origin != a+" document 1" {
		t.Errorf("main = %+v", s.Main)
	}
	cm, ok := s.ConfigMap("app", "default")
	if !ok || string(cm.Data["app.conf"]) != "x=1\n" || string(cm.Data["blob"]) != "\x00\x01\x02" {
		t.Errorf("configmap = %v %q", ok, cm.Data)
	}
	sec, ok := s.Secret("creds", "")
	if !ok || string(sec.Data["user"]) != "secret" || string(sec.Data["pw"]) != "new" {
		t.Errorf("secret = %v %q", ok, sec.Data)
	}
	if _, ok := s.Secret("app", ""); ok {
		t.Error("a ConfigMap found as a Secret")
	}
}

func TestReadErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{name: "no VM", files: map[string]string{"a.yaml": cmDoc, "b.yaml": secretDoc},
			want: []string{"a.yaml, ", "b.yaml: no VirtualMachine or VirtualMachineInstance among the documents"}},
		{name: "two VMs", files: map[string]string{"a.yaml": vmDoc, "b.yaml": "---\n" + vmDoc + "---\n" + cmDoc},
			want: []string{"the documents hold 2 objects that are VMs", "a.yaml (VirtualMachine vm1)", "b.yaml document 1 (VirtualMachine vm1)"}},
		{name: "other kind", files: map[string]string{"a.yaml": vmDoc + "---\napiVersion: v1\nkind: Service\nmetadata: {name: s}\n"},
			want: []string{"a.yaml document 2: kind: \"Service\"", "not something vlctl run uses"}},
		{name: "secret not base64", files: map[string]string{"a.yaml": vmDoc + "---\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {k: '!!!'}\n"},
			want: []string{"a.yaml document 2: Secret", "illegal base64"}},
		{name: "unknown field", files: map[string]string{"a.yaml": vmDoc + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: s}\ndatta: {k: v}\n"},
			want: []string{"a.yaml document 2: ConfigMap", `unknown field "datta"`}},
		{name: "bad key", files: map[string]string{"a.yaml": vmDoc + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: s}\ndata: {'../x': v}\n"},
			want: []string{"a.yaml document 2: data: key \"../x\" is not a valid key"}},
		{name: "twice", files: map[string]string{"a.yaml": vmDoc + "---\n" + cmDoc, "b.yaml": cmDoc},
			want: []string{"b.yaml: ConfigMap \"app\" is given twice (first in ", "a.yaml document 2"}},
		{name: "empty", files: map[string]string{"a.yaml": "---\n"}, want: []string{"a.yaml: manifest holds no object"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var paths []string
			for _, n := range []string{"a.yaml", "b.yaml"} {
				if body, ok := tc.files[n]; ok {
					p := filepath.Join(dir, n)
					if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
						t.Fatal(err)
					}
					paths = append(paths, p)
				}
			}
			_, err := Read(paths, nil)
			if err == nil {
				t.Fatal("read, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestOthersAccepted(t *testing.T) {
	a := write(t, "a.yaml", vmDoc+"---\napiVersion: instancetype.kubevirt.io/v1beta1\nkind: VirtualMachineInstancetype\nmetadata: {name: it}\nspec: {}\n")
	s, err := Read([]string{a}, func(kind string) bool { return kind == "VirtualMachineInstancetype" })
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Others) != 1 || s.Others[0].Name != "it" {
		t.Errorf("others = %+v", s.Others)
	}
}

// A FIFO or a directory is refused at once, naming it.
func TestReadNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := ReadFiles([]string{fifo}); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), fifo+": not a regular file") {
			t.Errorf("FIFO: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading a FIFO blocks")
	}
	if _, err := ReadFiles([]string{dir}); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: %v", err)
	}
}

// A v1 List (kubectl get -o yaml of several objects) stands for its items.
func TestReadList(t *testing.T) {
	list := "apiVersion: v1\nkind: List\nmetadata: {resourceVersion: \"\"}\nitems:\n- " +
		strings.ReplaceAll(strings.TrimSpace(vmDoc), "\n", "\n  ") + "\n- " + strings.ReplaceAll(strings.TrimSpace(cmDoc), "\n", "\n  ") + "\n"
	a := write(t, "list.yaml", list)
	s, err := Read([]string{a}, nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, list)
	}
	if s.Main.Name != "vm1" || s.Main.Origin != a+" items[0]" {
		t.Errorf("main = %s", s.Main)
	}
	if _, ok := s.ConfigMap("app", ""); !ok {
		t.Error("the List's ConfigMap is missing")
	}
	_, err = Read([]string{write(t, "bad.yaml", "apiVersion: v1\nkind: List\nitemz: []\n")}, nil)
	if err == nil || !strings.Contains(err.Error(), `bad.yaml: kind List: json: unknown field "itemz"`) {
		t.Errorf("bad List: %v", err)
	}
}
