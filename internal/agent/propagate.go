package agent

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"time"

	"github.com/digitalocean/go-libvirt"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/domain/bounded"
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

// StartCredentials starts propagating the VMI's accessCredentials through
// the guest agent (SSH keys and passwords from the secrets the pod mounts),
// once per launcher, as KubeVirt's launcher starts its credential manager
// at Sync. The outcome goes into the Domain's metadata
// (Spec.Metadata.KubeVirt.AccessCredential), from which virt-handler sets
// the AccessCredentialsSynchronized condition.
func (g *Guest) StartCredentials(v *v1.VirtualMachineInstance) {
	if len(CredentialSecrets(v)) == 0 {
		return
	}
	// Read before g.mu, as in SyncTime.
	ctx := g.cfg.RunContext()
	g.mu.Lock()
	if g.credentialsStarted {
		g.mu.Unlock()
		return
	}
	g.credentialsStarted = true
	g.mu.Unlock()
	go g.propagateCredentials(ctx, v.DeepCopy())
}

func (g *Guest) propagateCredentials(ctx context.Context, v *v1.VirtualMachineInstance) {
	check := time.NewTicker(credentialsCheckInterval)
	defer check.Stop()
	var (
		applied     Credentials
		appliedAt   time.Time
		needApplied = true
		warned      bool // the deprecated-flow warning is out
	)
	for {
		c, err := ReadCredentials(v, g.credentialSecretDir)
		switch {
		case err != nil:
			g.cfg.ReportCredentials(ctx, false, err.Error())
			needApplied = true
		case needApplied || !reflect.DeepEqual(c, applied) || time.Since(appliedAt) >= credentialsResync:
			deprecated, err := g.applyCredentials(ctx, c)
			if err != nil {
				g.cfg.Log.Warn("access credentials not propagated", "reason", err.Error())
				g.cfg.ReportCredentials(ctx, false, err.Error())
			} else {
				g.cfg.Log.Info("access credentials propagated through the guest agent", "users", len(c.Keys)+len(c.Passwords), "keyFileFallback", deprecated)
				g.cfg.ReportCredentials(ctx, true, "")
			}
			// As KubeVirt v1.9: one warning on the VMI while the keys keep
			// needing the file-based way, again after a round without it.
			if err == nil && deprecated && !warned {
				g.cfg.Warn(string(v1.AccessCredentialsSyncSuccess), deprecatedKeysMessage)
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
func (g *Guest) credentialSecretDir(secret string) (string, error) {
	name := secret + "-access-cred"
	if err := layout.CheckName(name); err != nil {
		return "", err
	}
	return g.cfg.SecretDir(name), nil
}

// applyCredentials sets each user's authorized SSH keys (replacing the
// file, libvirt's guest-ssh-add-authorized-keys with reset) and password
// (guest-set-user-password) through the agent, with KubeVirt's messages.
func (g *Guest) applyCredentials(ctx context.Context, c Credentials) (deprecated bool, err error) {
	if _, err := g.Command(ctx, `{"execute":"guest-ping"}`); err != nil {
		// KubeVirt's message, shown on the VMI.
		return false, errors.New("Guest agent is offline")
	}
	l, d, err := g.defined()
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
		g.cfg.Log.Debug("could not set SSH keys with guest-ssh-add-authorized-keys; writing the file", "user", user, "reason", err.Error())
		fctx, cancel := context.WithTimeout(ctx, credentialsCallTimeout)
		ferr := WriteAuthorizedKeysFile(fctx, g.Command, user, keys)
		cancel()
		if ferr != nil {
			// KubeVirt's message, shown on the VMI.
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
			// KubeVirt's message, shown on the VMI.
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
