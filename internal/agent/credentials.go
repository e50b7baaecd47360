package agent

import (
	"fmt"
	"strings"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/podvolume"
)

// Credentials are what a VMI's accessCredentials propagated by the guest
// agent (propagationMethod qemuGuestAgent) ask for, read from the secrets
// the pod mounts: per user, the SSH public keys to authorize and the
// password.
type Credentials struct {
	// Keys are each user's keys: every non-empty line of every file of
	// each secret naming the user, in the VMI's order (KubeVirt's).
	Keys map[string][]string
	// Passwords are the passwords of the user-password secrets: the file
	// name is the user, its trimmed content the password.
	Passwords map[string]string
}

// CredentialSecrets lists the secrets of the accessCredentials the guest
// agent propagates; none means there is nothing for the agent to do.
func CredentialSecrets(vmi *v1.VirtualMachineInstance) []string {
	var out []string
	for _, ac := range vmi.Spec.AccessCredentials {
		if s := credentialSecret(ac); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func credentialSecret(ac v1.AccessCredential) string {
	switch {
	case ac.SSHPublicKey != nil && ac.SSHPublicKey.PropagationMethod.QemuGuestAgent != nil:
		if ac.SSHPublicKey.Source.Secret != nil {
			return ac.SSHPublicKey.Source.Secret.SecretName
		}
	case ac.UserPassword != nil && ac.UserPassword.PropagationMethod.QemuGuestAgent != nil:
		if ac.UserPassword.Source.Secret != nil {
			return ac.UserPassword.Source.Secret.SecretName
		}
	}
	return ""
}

// ReadCredentials reads the credentials from the secrets; secretDir is
// where the pod mounts a secret (KubeVirt mounts secret S as
// "<S>-access-cred" under its secret directory). Only a secret's top-level
// files count, as in KubeVirt.
func ReadCredentials(vmi *v1.VirtualMachineInstance, secretDir func(secret string) (string, error)) (Credentials, error) {
	c := Credentials{Keys: map[string][]string{}, Passwords: map[string]string{}}
	for i, ac := range vmi.Spec.AccessCredentials {
		secret := credentialSecret(ac)
		if secret == "" {
			continue
		}
		dir, err := secretDir(secret)
		if err != nil {
			return Credentials{}, fmt.Errorf("accessCredentials[%d] secret %s: %w", i, secret, err)
		}
		files, err := podvolume.ReadDir(dir)
		if err != nil {
			return Credentials{}, fmt.Errorf("accessCredentials[%d] secret %s: %w", i, secret, err)
		}
		if ac.SSHPublicKey != nil {
			var keys []string
			for _, f := range files {
				if strings.Contains(f.Name, "/") {
					continue
				}
				for _, line := range strings.Split(string(f.Data), "\n") {
					if k := strings.TrimSpace(line); k != "" {
						keys = append(keys, k)
					}
				}
			}
			for _, user := range ac.SSHPublicKey.PropagationMethod.QemuGuestAgent.Users {
				c.Keys[user] = append(c.Keys[user], keys...)
			}
			continue
		}
		for _, f := range files {
			if strings.Contains(f.Name, "/") {
				continue
			}
			if p := strings.TrimSpace(string(f.Data)); p != "" {
				c.Passwords[f.Name] = p
			}
		}
	}
	return c, nil
}
