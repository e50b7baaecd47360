package domain

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"time"

	"github.com/digitalocean/go-libvirt"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/agent"
	"github.com/virtlauncher/virtlauncher/internal/domain/bounded"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
	"github.com/virtlauncher/virtlauncher/internal/layout"
)

// KubeVirt's timing for access credentials: the secrets are checked for
// changes every 15 s and applied again every 5 minutes whatever happened;
// a failed round is retried at the next check.
const (
	credentialsCheckInterval = 15 * time.Second
	credentialsResync        = 5 * time.Minute
	// credentialsCallTimeout bounds one libvirt call that reaches the agent.
	credentialsCallTimeout = 30 * time.Second
)

// deprecatedKeysMessage is KubeVirt's warning when SSH keys went into the
// guest through the file-based fallback.
const deprecatedKeysMessage = "Used deprecated method to set SSH keys. It will be removed in a future release. " +
	"Update qemu guest agent to 5.2 or newer to keep SSH key injection working."

// startCredentials starts propagating the VMI's accessCredentials through
// the guest agent (SSH keys and passwords from the secrets the pod mounts),
// once per launcher, as KubeVirt's launcher starts its credential manager
// at Sync. The outcome goes into the Domain's metadata
// (Spec.Metadata.KubeVirt.AccessCredential), from which virt-handler sets
// the AccessCredentialsSynchronized condition.
func (m *Manager) startCredentials(v *v1.VirtualMachineInstance) {
	if len(agent.CredentialSecrets(v)) == 0 {
		return
	}
	m.mu.Lock()
	if m.credentialsStarted {
		m.mu.Unlock()
		return
	}
	m.credentialsStarted = true
	ctx := m.runContextLocked()
	m.mu.Unlock()
	go m.propagateCredentials(ctx, v.DeepCopy())
}

func (m *Manager) propagateCredentials(ctx context.Context, v *v1.VirtualMachineInstance) {
	check := time.NewTicker(credentialsCheckInterval)
	defer check.Stop()
	var (
		applied     agent.Credentials
		appliedAt   time.Time
		needApplied = true
		warned      bool // the deprecated-flow warning is out
	)
	for {
		c, err := agent.ReadCredentials(v, m.credentialSecretDir)
		switch {
		case err != nil:
			m.reportCredentials(ctx, false, err.Error())
			needApplied = true
		case needApplied || !reflect.DeepEqual(c, applied) || time.Since(appliedAt) >= credentialsResync:
			deprecated, err := m.applyCredentials(ctx, c)
			if err != nil {
				m.log.Warn("access credentials not propagated", "reason", err.Error())
				m.reportCredentials(ctx, false, err.Error())
			} else {
				m.log.Info("access credentials propagated through the guest agent", "users", len(c.Keys)+len(c.Passwords), "keyFileFallback", deprecated)
				m.reportCredentials(ctx, true, "")
			}
			// As KubeVirt v1.9: one warning on the VMI while the keys keep
			// needing the file-based way, again after a round without it.
			if err == nil && deprecated && !warned {
				_, name, ns := m.names()
				m.queue(outEvent{k8s: true, ref: VMIRef{Name: name, Namespace: ns, UID: m.uidValue()}, k8sType: "Warning",
					reason: string(v1.AccessCredentialsSyncSuccess), message: deprecatedKeysMessage})
			}
			warned = err == nil && deprecated
			applied, appliedAt, needApplied = c, time.Now(), err != nil
		}
		select {
		case <-ctx.Done():
			return
		case <-check.C:
		}
	}
}

// credentialSecretDir is where the pod mounts an access credential's
// secret: "<secret>-access-cred" in the secret directory, as KubeVirt
// mounts it.
func (m *Manager) credentialSecretDir(secret string) (string, error) {
	name := secret + "-access-cred"
	if err := layout.CheckName(name); err != nil {
		return "", err
	}
	return m.cfg.Layout.SecretSource(name), nil
}

// applyCredentials sets each user's authorized SSH keys (replacing the
// file, libvirt's guest-ssh-add-authorized-keys with reset) and password
// (guest-set-user-password) through the agent, with KubeVirt's messages.
func (m *Manager) applyCredentials(ctx context.Context, c agent.Credentials) (deprecated bool, err error) {
	if _, err := m.agentCommand(ctx, `{"execute":"guest-ping"}`); err != nil {
		//lint:ignore ST1005 KubeVirt's message, shown on the VMI.
		return false, errors.New("Guest agent is offline")
	}
	l, d, err := m.definedDomain()
	if err != nil {
		return false, err
	}
	call := func(what string, f func() error) error {
		cctx, cancel := context.WithTimeout(ctx, credentialsCallTimeout)
		defer cancel()
		return bounded.Call(cctx, what, f)
	}
	for _, user := range sortedKeys(c.Keys) {
		keys := c.Keys[user]
		err := call("set authorized SSH keys", func() error { return l.DomainAuthorizedSshKeysSet(d, user, keys, 0) })
		if err == nil {
			continue
		}
		// An agent without guest-ssh-add-authorized-keys (before 5.2, or
		// with it disabled): KubeVirt's file-based way.
		m.log.Debug("could not set SSH keys with guest-ssh-add-authorized-keys; writing the file", "user", user, "reason", err.Error())
		fctx, cancel := context.WithTimeout(ctx, credentialsCallTimeout)
		ferr := agent.WriteAuthorizedKeysFile(fctx, m.agentCommand, user, keys)
		cancel()
		if ferr != nil {
			//lint:ignore ST1005 KubeVirt's message, shown on the VMI.
			return deprecated, fmt.Errorf("Error encountered writing ssh pub key access credentials for user [%s]: "+
				"failed to set SSH keys: error from guest-ssh-add-authorized-keys: %w; error from using guest-file-write: %w", user, err, ferr)
		}
		deprecated = true
	}
	for _, user := range sortedKeys(c.Passwords) {
		pw := c.Passwords[user]
		if err := call("set user password", func() error {
			return l.DomainSetUserPassword(d, libvirt.OptString{user}, libvirt.OptString{pw}, 0)
		}); err != nil {
			//lint:ignore ST1005 KubeVirt's message, shown on the VMI.
			return deprecated, fmt.Errorf("Error encountered setting password for user [%s]: %w", user, err)
		}
	}
	return deprecated, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// reportCredentials puts the outcome into the Domain's metadata and sends
// the Domain when it changed.
func (m *Manager) reportCredentials(ctx context.Context, succeeded bool, message string) {
	ac := &domainjson.AccessCredentialMetadata{Succeeded: succeeded, Message: message}
	m.mu.Lock()
	changed := m.md.AccessCredential == nil || *m.md.AccessCredential != *ac
	m.md.AccessCredential = ac
	m.mu.Unlock()
	if changed {
		m.refresh(ctx, EventModified, true)
	}
}
