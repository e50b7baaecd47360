package standalone

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/instancetype"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/manifest"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// configVolume is the directory the kubelet would have mounted for one of
// the VMI's configMap, secret, sysprep or cloud-init secret volumes, filled
// from a ConfigMap or Secret given among the documents. Root writes it into
// the pod's private directory before the hand-over; the launcher builds the
// volume's ISO (or cloud-init data) from it as it does in a pod.
type configVolume struct {
	dir   func(layout.Layout) string
	files map[string][]byte
	perm  fs.FileMode
}

// configVolumes works out the config volumes' directories from the
// documents. A ConfigMap or Secret that is not among them is an error
// naming the volume's field, unless the volume is optional (then its
// directory is empty, as the kubelet mounts it).
func configVolumes(v *v1.VirtualMachineInstance, set *manifest.Set) ([]configVolume, error) {
	ns := v.Namespace
	var out []configVolume
	var errs []error
	cm := func(field, name string, optional *bool) map[string][]byte {
		if set != nil {
			if c, ok := set.ConfigMap(name, ns); ok {
				return c.Data
			}
		}
		if optional != nil && *optional {
			return map[string][]byte{}
		}
		errs = append(errs, fmt.Errorf("%s: ConfigMap %q is not among the documents%s; give it with -f", field, name, given(set)))
		return nil
	}
	secret := func(field, name string, optional *bool) map[string][]byte {
		if set != nil {
			if s, ok := set.Secret(name, ns); ok {
				return s.Data
			}
		}
		if optional != nil && *optional {
			return map[string][]byte{}
		}
		errs = append(errs, fmt.Errorf("%s: Secret %q is not among the documents%s; give it with -f", field, name, given(set)))
		return nil
	}
	for i, vol := range v.Spec.Volumes {
		name := vol.Name
		field := fmt.Sprintf("spec.volumes[%d]", i)
		switch {
		case vol.ConfigMap != nil:
			if d := cm(field+".configMap.name", vol.ConfigMap.Name, vol.ConfigMap.Optional); d != nil {
				out = append(out, configVolume{dir: func(l layout.Layout) string { return l.ConfigMapSource(name) }, files: d, perm: 0o644})
			}
		case vol.Secret != nil:
			if d := secret(field+".secret.secretName", vol.Secret.SecretName, vol.Secret.Optional); d != nil {
				out = append(out, configVolume{dir: func(l layout.Layout) string { return l.SecretSource(name) }, files: d, perm: 0o600})
			}
		case vol.Sysprep != nil && vol.Sysprep.ConfigMap != nil:
			if d := cm(field+".sysprep.configMap.name", vol.Sysprep.ConfigMap.Name, nil); d != nil {
				out = append(out, configVolume{dir: func(l layout.Layout) string { return l.SysprepSource(name) }, files: d, perm: 0o644})
			}
		case vol.Sysprep != nil && vol.Sysprep.Secret != nil:
			if d := secret(field+".sysprep.secret.name", vol.Sysprep.Secret.Name, nil); d != nil {
				out = append(out, configVolume{dir: func(l layout.Layout) string { return l.SysprepSource(name) }, files: d, perm: 0o600})
			}
		default:
			if c := cloudInitSecrets(field, vol, secret); c != nil {
				out = append(out, *c)
			}
		}
	}
	out = append(out, credentialSecrets(v, secret)...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// credentialSecrets are the directories of the access credentials'
// Secrets (SSH keys, user passwords), "<secret>-access-cred" where a pod
// mounts them, each Secret once.
func credentialSecrets(v *v1.VirtualMachineInstance, secret func(field, name string, optional *bool) map[string][]byte) []configVolume {
	var out []configVolume
	seen := map[string]bool{}
	for i, ac := range v.Spec.AccessCredentials {
		var src *v1.AccessCredentialSecretSource
		field := fmt.Sprintf("spec.accessCredentials[%d]", i)
		switch {
		case ac.SSHPublicKey != nil:
			src, field = ac.SSHPublicKey.Source.Secret, field+".sshPublicKey.source.secret.secretName"
		case ac.UserPassword != nil:
			src, field = ac.UserPassword.Source.Secret, field+".userPassword.source.secret.secretName"
		}
		if src == nil || src.SecretName == "" || seen[src.SecretName] {
			continue
		}
		seen[src.SecretName] = true
		if d := secret(field, src.SecretName, nil); d != nil {
			name := src.SecretName + "-access-cred"
			out = append(out, configVolume{dir: func(l layout.Layout) string { return l.SecretSource(name) }, files: d, perm: 0o600})
		}
	}
	return out
}

// cloudInitSecrets is the secret directory of a cloud-init volume whose
// user or network data comes from a Secret: the launcher reads userdata
// and networkdata there, as a pod mounts them.
func cloudInitSecrets(field string, vol v1.Volume, secret func(field, name string, optional *bool) map[string][]byte) *configVolume {
	var userRef, netRef *corev1.LocalObjectReference
	switch {
	case vol.CloudInitNoCloud != nil:
		field += ".cloudInitNoCloud"
		userRef, netRef = vol.CloudInitNoCloud.UserDataSecretRef, vol.CloudInitNoCloud.NetworkDataSecretRef
	case vol.CloudInitConfigDrive != nil:
		field += ".cloudInitConfigDrive"
		userRef, netRef = vol.CloudInitConfigDrive.UserDataSecretRef, vol.CloudInitConfigDrive.NetworkDataSecretRef
	}
	if userRef == nil && netRef == nil {
		return nil
	}
	files := map[string][]byte{}
	ok := true
	if userRef != nil {
		d := secret(field+".secretRef.name", userRef.Name, nil)
		ok = ok && d != nil
		for _, k := range []string{"userdata", "userData"} {
			if b, found := d[k]; found {
				files[k] = b
			}
		}
	}
	if netRef != nil {
		d := secret(field+".networkDataSecretRef.name", netRef.Name, nil)
		ok = ok && d != nil
		for _, k := range []string{"networkdata", "networkData"} {
			if b, found := d[k]; found {
				files[k] = b
			}
		}
	}
	if !ok {
		return nil
	}
	name := vol.Name
	return &configVolume{dir: func(l layout.Layout) string { return l.SecretSource(name) }, files: files, perm: 0o600}
}

func given(set *manifest.Set) string {
	if set == nil || len(set.Files) == 0 {
		return ""
	}
	return fmt.Sprintf(" (%v)", set.Files)
}

// writeConfigVolumes writes the config volumes' files into the work dir,
// through its descriptor, before the hand-over gives them to the VM's id.
func (r *runner) writeConfigVolumes() error {
	for _, c := range r.cfg.configVols {
		rel, err := r.rel(c.dir(r.layout))
		if err != nil {
			return err
		}
		if err := r.dir.MkdirAll(rel, 0o700); err != nil {
			return fmt.Errorf("config volume: %w", err)
		}
		for _, k := range manifest.Keys(c.files) {
			if err := r.dir.WriteFile(path.Join(rel, k), c.files[k], c.perm); err != nil {
				return fmt.Errorf("config volume: %w", err)
			}
		}
	}
	return nil
}

// files are the manifest files of the run: FILE, then each -f.
func (c *ManifestOptions) files() []string {
	var out []string
	if c.File != "" {
		out = append(out, c.File)
	}
	return append(out, c.Files...)
}

// manifestName names the manifest in errors.
func (c *session) manifestName() string { return c.guest.name(c) }

// manifestFiles names the manifest's files.
func (c *session) manifestFiles() string {
	names := slices.Clone(c.files())
	for i, f := range names {
		if f == manifest.Stdin {
			names[i] = "stdin"
		}
	}
	return strings.Join(names, ", ")
}

// loadManifest reads the run's documents: the VMI to run (defaulted and
// validated), its VirtualMachine (nil for a VMI manifest) and the files
// of its config volumes. Errors name the document.
func loadManifest(cfg ManifestOptions) (*v1.VirtualMachineInstance, *v1.VirtualMachine, []configVolume, error) {
	l, err := instancetype.Load(cfg.files(), cfg.Instancetypes, vmi.Options{DefaultBinding: cfg.Binding})
	if err != nil {
		return nil, nil, nil, err
	}
	set, v, vm := l.Set, l.VMI, l.VM
	cv, err := configVolumes(v, set)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", set.Main.Origin, err)
	}
	return v, vm, cv, nil
}

// hasConfigVolumes says whether any volume or access credential of v is
// filled from a ConfigMap or Secret.
func hasConfigVolumes(v *v1.VirtualMachineInstance) bool {
	if len(v.Spec.AccessCredentials) > 0 {
		return true
	}
	for _, vol := range v.Spec.Volumes {
		if vol.ConfigMap != nil || vol.Secret != nil || vol.Sysprep != nil ||
			(vol.CloudInitNoCloud != nil && (vol.CloudInitNoCloud.UserDataSecretRef != nil || vol.CloudInitNoCloud.NetworkDataSecretRef != nil)) ||
			(vol.CloudInitConfigDrive != nil && (vol.CloudInitConfigDrive.UserDataSecretRef != nil || vol.CloudInitConfigDrive.NetworkDataSecretRef != nil)) {
			return true
		}
	}
	return false
}
