package standalone

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/layout"
)

const configVM = `apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata: {name: cfg, namespace: ns1}
spec:
  runStrategy: Always
  template:
    spec:
      domain:
        devices:
          disks:
          - {name: app, disk: {}}
          - {name: creds, disk: {}}
          - {name: cloudinit, disk: {}}
        memory: {guest: 64Mi}
      accessCredentials:
      - sshPublicKey:
          source: {secret: {secretName: keys}}
          propagationMethod: {noCloud: {}}
      volumes:
      - name: app
        configMap: {name: app-config}
      - name: creds
        secret: {secretName: creds}
      - name: cloudinit
        cloudInitNoCloud:
          secretRef: {name: ci}
`

const configDocs = `apiVersion: v1
kind: ConfigMap
metadata: {name: app-config, namespace: ns1}
data: {app.conf: "x=1"}
---
apiVersion: v1
kind: Secret
metadata: {name: creds}
stringData: {token: abc}
---
apiVersion: v1
kind: Secret
metadata: {name: ci}
data: {userdata: I2Nsb3VkLWNvbmZpZwo=}
---
apiVersion: v1
kind: Secret
metadata: {name: keys}
stringData: {key1: ssh-ed25519 AAAA}
`

// A VM whose configMap, secret and cloud-init volumes are backed by
// documents of a second file: each volume's directory gets the keys.
func TestLoadManifestConfigVolumes(t *testing.T) {
	dir := t.TempDir()
	vmFile, docs := filepath.Join(dir, "vm.yaml"), filepath.Join(dir, "docs.yaml")
	os.WriteFile(vmFile, []byte(configVM), 0o600)
	os.WriteFile(docs, []byte(configDocs), 0o600)
	v, vm, cv, err := loadManifest(ManifestOptions{File: vmFile, Files: []string{docs}})
	if err != nil {
		t.Fatal(err)
	}
	if vm == nil || v.Name != "cfg" {
		t.Fatalf("vm %v, vmi %s", vm, v.Name)
	}
	l := layout.Under("/w")
	got := map[string]string{}
	for _, c := range cv {
		for k, b := range c.files {
			got[c.dir(l)+"/"+k] = string(b) + " " + c.perm.String()
		}
	}
	want := map[string]string{
		l.ConfigMapSource("app") + "/app.conf":       "x=1 -rw-r--r--",
		l.SecretSource("creds") + "/token":           "abc -rw-------",
		l.SecretSource("cloudinit") + "/userdata":    "#cloud-config\n -rw-------",
		l.SecretSource("keys-access-cred") + "/key1": "ssh-ed25519 AAAA -rw-------",
	}
	if len(got) != len(want) {
		t.Errorf("files %q, want %q", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %q, want %q", k, got[k], w)
		}
	}
}

// A referenced ConfigMap or Secret that is not given is an error naming
// the volume's field and the files read.
func TestLoadManifestMissingConfig(t *testing.T) {
	dir := t.TempDir()
	vmFile := filepath.Join(dir, "vm.yaml")
	os.WriteFile(vmFile, []byte(configVM), 0o600)
	_, _, _, err := loadManifest(ManifestOptions{File: vmFile})
	if err == nil {
		t.Fatal("loaded without its ConfigMap and Secrets")
	}
	for _, w := range []string{
		`spec.volumes[0].configMap.name: ConfigMap "app-config" is not among the documents ([` + vmFile + `])`,
		`spec.volumes[1].secret.secretName: Secret "creds" is not among the documents`,
		`spec.volumes[2].cloudInitNoCloud.secretRef.name: Secret "ci" is not among the documents`,
		`spec.accessCredentials[0].sshPublicKey.source.secret.secretName: Secret "keys" is not among the documents`,
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	// An optional one is an empty directory, as the kubelet mounts it.
	opt := strings.Replace(configVM, "configMap: {name: app-config}", "configMap: {name: app-config, optional: true}", 1)
	opt = strings.Replace(opt, "secret: {secretName: creds}", "secret: {secretName: creds, optional: true}", 1)
	opt = strings.Replace(opt, "secretRef: {name: ci}", "userData: '#cloud-config'", 1)
	opt = strings.Replace(opt, "secretName: keys", "secretName: creds", 1)
	os.WriteFile(filepath.Join(dir, "creds.yaml"), []byte("apiVersion: v1\nkind: Secret\nmetadata: {name: creds}\n"), 0o600)
	os.WriteFile(vmFile, []byte(opt), 0o600)
	_, _, cv, err := loadManifest(ManifestOptions{File: vmFile, Files: []string{filepath.Join(dir, "creds.yaml")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(cv) != 3 || len(cv[0].files)+len(cv[1].files)+len(cv[2].files) != 0 {
		t.Errorf("optional volumes: %+v", cv)
	}
}
