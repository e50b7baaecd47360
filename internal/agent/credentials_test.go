package agent

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	v1 "kubevirt.io/api/core/v1"
)

func sshCred(secret string, users ...string) v1.AccessCredential {
	return v1.AccessCredential{SSHPublicKey: &v1.SSHPublicKeyAccessCredential{
		Source: v1.SSHPublicKeyAccessCredentialSource{Secret: &v1.AccessCredentialSecretSource{SecretName: secret}},
		PropagationMethod: v1.SSHPublicKeyAccessCredentialPropagationMethod{
			QemuGuestAgent: &v1.QemuGuestAgentSSHPublicKeyAccessCredentialPropagation{Users: users}},
	}}
}

func passCred(secret string) v1.AccessCredential {
	return v1.AccessCredential{UserPassword: &v1.UserPasswordAccessCredential{
		Source: v1.UserPasswordAccessCredentialSource{Secret: &v1.AccessCredentialSecretSource{SecretName: secret}},
		PropagationMethod: v1.UserPasswordAccessCredentialPropagationMethod{
			QemuGuestAgent: &v1.QemuGuestAgentUserPasswordAccessCredentialPropagation{}},
	}}
}

// TestReadCredentials: keys of every secret naming a user, in order, one
// per non-empty line; passwords by file name; Kubernetes' ".." entries and
// subdirectories ignored; credentials propagated otherwise (cloud-init)
// left to others.
func TestReadCredentials(t *testing.T) {
	root := t.TempDir()
	write := func(secret, name, data string) {
		d := filepath.Join(root, secret)
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a", "k1", "key-a1\n\n  key-a2  \n")
	write("a", "..data_hidden", "not-a-key\n")
	write("a", "sub/k", "nested-not-a-key\n")
	write("b", "k", "key-b\n")
	write("p", "alice", " pw-alice \n")
	write("p", "bob", "\n")
	write("c", "k", "cloud-init-key\n")
	dir := func(s string) (string, error) { return filepath.Join(root, s), nil }

	vmi := &v1.VirtualMachineInstance{}
	vmi.Spec.AccessCredentials = []v1.AccessCredential{
		sshCred("a", "alice", "root"), sshCred("b", "alice"), passCred("p"),
		{SSHPublicKey: &v1.SSHPublicKeyAccessCredential{
			Source:            v1.SSHPublicKeyAccessCredentialSource{Secret: &v1.AccessCredentialSecretSource{SecretName: "c"}},
			PropagationMethod: v1.SSHPublicKeyAccessCredentialPropagationMethod{NoCloud: &v1.NoCloudSSHPublicKeyAccessCredentialPropagation{}},
		}},
	}
	if got := CredentialSecrets(vmi); !reflect.DeepEqual(got, []string{"a", "b", "p"}) {
		t.Errorf("CredentialSecrets = %v, want [a b p]", got)
	}
	c, err := ReadCredentials(vmi, dir)
	if err != nil {
		t.Fatal(err)
	}
	want := Credentials{
		Keys:      map[string][]string{"alice": {"key-a1", "key-a2", "key-b"}, "root": {"key-a1", "key-a2"}},
		Passwords: map[string]string{"alice": "pw-alice"},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("ReadCredentials = %+v, want %+v", c, want)
	}

	// A secret that is not mounted, or a refused name, is an error naming it.
	vmi.Spec.AccessCredentials = append(vmi.Spec.AccessCredentials, sshCred("missing", "alice"))
	if _, err := ReadCredentials(vmi, dir); err == nil || !strings.Contains(err.Error(), "secret missing") {
		t.Errorf("missing secret: %v", err)
	}
	refuse := func(string) (string, error) { return "", errors.New("bad name") }
	if _, err := ReadCredentials(vmi, refuse); err == nil || !strings.Contains(err.Error(), "accessCredentials[0] secret a: bad name") {
		t.Errorf("refused name: %v", err)
	}
}
