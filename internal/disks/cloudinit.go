package disks

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/google/uuid"
	k8sv1 "k8s.io/api/core/v1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/layout"
)

// Volume labels cloud-init looks for.
const (
	NoCloudLabel     = "cidata"
	ConfigDriveLabel = "config-2"
)

// cloudInitSource is what NoCloud and ConfigDrive sources have in common.
type cloudInitSource struct {
	kind                         string // for error messages
	userRef, networkRef          *k8sv1.LocalObjectReference
	user, user64, network, net64 string
}

// Data sources, as KubeVirt names them in CloudInitData.DataSource.
const (
	DataSourceNoCloud     = "noCloud"
	DataSourceConfigDrive = "configDrive"
)

// CloudInitData is a VMI's cloud-init data on its way to the ISO, in the
// JSON shape of KubeVirt's pkg/cloud-init CloudInitData (Go field names as
// keys): hook sidecars receive it in PreCloudInitIso and may return a
// changed one.
type CloudInitData struct {
	DataSource          string
	NoCloudMetaData     *NoCloudMetadata
	ConfigDriveMetaData *ConfigDriveMetadata
	UserData            string
	NetworkData         string
	// DevicesData is KubeVirt's device role tags list; this launcher makes
	// none, so it is null unless a sidecar returns one (then it becomes
	// the ConfigDrive meta-data's devices, as in KubeVirt).
	DevicesData json.RawMessage
	VolumeName  string
}

// Complete reports whether d can be written as it is: user data and the
// meta-data of a source. KubeVirt uses this test to tell a sidecar that
// returned new-style data from one that returned only the older form.
func (d *CloudInitData) Complete() bool {
	return d != nil && d.UserData != "" && (d.NoCloudMetaData != nil || d.ConfigDriveMetaData != nil)
}

// CloudInitHook may change the cloud-init data before its ISO is written
// (KubeVirt's PreCloudInitIso hook point); hooks.Manager is one.
type CloudInitHook interface {
	PreCloudInitIso(ctx context.Context, vmi *v1.VirtualMachineInstance, data *CloudInitData) (*CloudInitData, error)
}

// NoCloudMetadata is NoCloud's meta-data, in KubeVirt's field names. JSON is
// valid YAML, which cloud-init expects there.
type NoCloudMetadata struct {
	InstanceType  string            `json:"instance-type,omitempty"`
	InstanceID    string            `json:"instance-id"`
	LocalHostname string            `json:"local-hostname,omitempty"`
	PublicSSHKeys map[string]string `json:"public-keys,omitempty"`
}

// ConfigDriveMetadata is openstack/latest/meta_data.json as KubeVirt writes it.
type ConfigDriveMetadata struct {
	InstanceType  string            `json:"instance_type,omitempty"`
	InstanceID    string            `json:"instance_id"`
	LocalHostname string            `json:"local_hostname,omitempty"`
	Hostname      string            `json:"hostname,omitempty"`
	UUID          string            `json:"uuid,omitempty"`
	Devices       json.RawMessage   `json:"devices,omitempty"`
	PublicSSHKeys map[string]string `json:"public_keys,omitempty"`
}

// cloudInit writes the ISO of a cloudInitNoCloud or cloudInitConfigDrive
// volume: the data from the spec (and its secrets), then the hook's
// changes, then the files.
func (p *Preparer) cloudInit(ctx context.Context, vmi *v1.VirtualMachineInstance, vol *v1.Volume) error {
	data, err := p.cloudInitData(vmi, vol)
	if err != nil {
		return err
	}
	if p.Hooks != nil {
		source := data.DataSource
		if data, err = p.Hooks.PreCloudInitIso(ctx, vmi, data); err != nil {
			return fmt.Errorf("PreCloudInitIso hook: %w", err)
		}
		if data == nil || data.DataSource != source {
			got := "no data"
			if data != nil {
				got = fmt.Sprintf("data source %q", data.DataSource)
			}
			return fmt.Errorf("PreCloudInitIso hook: returned %s for a %s volume", got, source)
		}
	}
	if err := p.writeCloudInit(vmi, data); err != nil {
		return err
	}
	if data.DataSource == DataSourceConfigDrive {
		p.mu.Lock()
		p.configDrive = data
		p.mu.Unlock()
	}
	return nil
}

// cloudInitData reads a cloud-init volume into KubeVirt's CloudInitData, as
// KubeVirt's ReadCloudInitVolumeDataSource does.
func (p *Preparer) cloudInitData(vmi *v1.VirtualMachineInstance, vol *v1.Volume) (*CloudInitData, error) {
	var src cloudInitSource
	noCloud := vol.CloudInitNoCloud != nil
	if noCloud {
		s := vol.CloudInitNoCloud
		src = cloudInitSource{"cloudInitNoCloud", s.UserDataSecretRef, s.NetworkDataSecretRef, s.UserData, s.UserDataBase64, s.NetworkData, s.NetworkDataBase64}
	} else {
		s := vol.CloudInitConfigDrive
		src = cloudInitSource{"cloudInitConfigDrive", s.UserDataSecretRef, s.NetworkDataSecretRef, s.UserData, s.UserDataBase64, s.NetworkData, s.NetworkDataBase64}
	}
	user, network, err := p.resolveCloudInit(vol.Name, src)
	if err != nil {
		return nil, err
	}
	keys, err := p.sshKeys(vmi, func(m v1.SSHPublicKeyAccessCredentialPropagationMethod) bool {
		if noCloud {
			return m.NoCloud != nil
		}
		return m.ConfigDrive != nil
	})
	if err != nil {
		return nil, err
	}
	d := &CloudInitData{UserData: user, NetworkData: network, VolumeName: vol.Name}
	if noCloud {
		d.DataSource = DataSourceNoCloud
		d.NoCloudMetaData = &NoCloudMetadata{
			InstanceType:  instancetype(vmi),
			InstanceID:    firmwareUUID(vmi),
			LocalHostname: hostname(vmi),
			PublicSSHKeys: keys,
		}
	} else {
		d.DataSource = DataSourceConfigDrive
		d.ConfigDriveMetaData = &ConfigDriveMetadata{
			InstanceType:  instancetype(vmi),
			InstanceID:    vmi.Name + "." + vmi.Namespace,
			Hostname:      hostname(vmi),
			UUID:          firmwareUUID(vmi),
			PublicSSHKeys: keys,
		}
	}
	return d, nil
}

// writeCloudInit writes d to its ISO. Meta-data a hook dropped is replaced
// by the minimal one KubeVirt writes then (instance id and type only).
func (p *Preparer) writeCloudInit(vmi *v1.VirtualMachineInstance, d *CloudInitData) error {
	if d.UserData == "" && d.NetworkData == "" {
		return errors.New("cloud-init data: user data or network data is required")
	}
	var (
		iso, label string
		files      []isoFile
	)
	switch d.DataSource {
	case DataSourceNoCloud:
		path, err := p.cloudInitISOPath(vmi, true)
		if err != nil {
			return err
		}
		md := d.NoCloudMetaData
		if md == nil {
			md = &NoCloudMetadata{InstanceID: firmwareUUID(vmi), InstanceType: instancetype(vmi)}
		}
		meta, err := json.Marshal(md)
		if err != nil {
			return err
		}
		iso, label = path, NoCloudLabel
		files = []isoFile{
			{Name: "user-data", Data: []byte(d.UserData)},
			{Name: "meta-data", Data: meta},
		}
		if d.NetworkData != "" {
			files = append(files, isoFile{Name: "network-config", Data: []byte(d.NetworkData)})
		}
	case DataSourceConfigDrive:
		path, err := p.cloudInitISOPath(vmi, false)
		if err != nil {
			return err
		}
		md := d.ConfigDriveMetaData
		if md == nil {
			md = &ConfigDriveMetadata{InstanceID: vmi.Name + "." + vmi.Namespace, UUID: firmwareUUID(vmi), InstanceType: instancetype(vmi)}
		}
		if dev := bytes.TrimSpace(d.DevicesData); len(dev) > 0 && !bytes.Equal(dev, []byte("null")) {
			c := *md
			c.Devices = dev
			md = &c
		}
		meta, err := json.Marshal(md)
		if err != nil {
			return err
		}
		iso, label = path, ConfigDriveLabel
		files = []isoFile{
			{Name: "openstack/latest/meta_data.json", Data: meta},
			{Name: "openstack/latest/user_data", Data: []byte(d.UserData)},
		}
		if d.NetworkData != "" {
			files = append(files, isoFile{Name: "openstack/latest/network_data.json", Data: []byte(d.NetworkData)})
		}
	default:
		return fmt.Errorf("cloud-init data: data source %q: must be %s or %s", d.DataSource, DataSourceNoCloud, DataSourceConfigDrive)
	}
	return p.writeISO(iso, label, files)
}

func (p *Preparer) cloudInitISOPath(vmi *v1.VirtualMachineInstance, noCloud bool) (string, error) {
	if err := layout.CheckName(vmi.Namespace); err != nil {
		return "", fmt.Errorf("metadata.namespace: %w", err)
	}
	if err := layout.CheckName(vmi.Name); err != nil {
		return "", fmt.Errorf("metadata.name: %w", err)
	}
	if noCloud {
		return p.Layout.CloudInitNoCloudISO(vmi.Namespace, vmi.Name), nil
	}
	return p.Layout.CloudInitConfigDriveISO(vmi.Namespace, vmi.Name), nil
}

// resolveCloudInit returns the user and network data of a cloud-init
// source: from the secret the pod mounts at SecretSource(volume) when a
// secretRef is given, else inline, else base64.
func (p *Preparer) resolveCloudInit(volName string, s cloudInitSource) (user, network string, err error) {
	dir := p.Layout.SecretSource(volName)
	if s.userRef != nil {
		if user, err = readFirst(dir, "userdata", "userData"); err != nil {
			return "", "", fmt.Errorf("%s.secretRef %s: %w", s.kind, s.userRef.Name, err)
		}
	} else if user, err = rawOrBase64(s.user, s.user64); err != nil {
		return "", "", fmt.Errorf("%s.userDataBase64: %w", s.kind, err)
	}
	if s.networkRef != nil {
		if network, err = readFirst(dir, "networkdata", "networkData"); err != nil {
			return "", "", fmt.Errorf("%s.networkDataSecretRef %s: %w", s.kind, s.networkRef.Name, err)
		}
	} else if network, err = rawOrBase64(s.network, s.net64); err != nil {
		return "", "", fmt.Errorf("%s.networkDataBase64: %w", s.kind, err)
	}
	if user == "" && network == "" {
		return "", "", fmt.Errorf("%s: one of userData, userDataBase64, secretRef, networkData, networkDataBase64, networkDataSecretRef is required", s.kind)
	}
	return user, network, nil
}

func rawOrBase64(raw, b64 string) (string, error) {
	if raw != "" {
		return raw, nil
	}
	if b64 == "" {
		return "", nil
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
	if err != nil {
		return "", fmt.Errorf("not valid base64: %w", err)
	}
	return string(b), nil
}

// readFirst reads the first of names that exists in dir.
func readFirst(dir string, names ...string) (string, error) {
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err == nil {
			return string(b), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
	return "", fmt.Errorf("none of %s found in %s", strings.Join(names, ", "), dir)
}

// sshKeys reads the public keys of the access credentials propagated by the
// selected method, from the secrets the pod mounts at
// SecretSource(<secret>-access-cred), numbered in file-name order.
func (p *Preparer) sshKeys(vmi *v1.VirtualMachineInstance, want func(v1.SSHPublicKeyAccessCredentialPropagationMethod) bool) (map[string]string, error) {
	keys := map[string]string{}
	for i, ac := range vmi.Spec.AccessCredentials {
		k := ac.SSHPublicKey
		if k == nil || !want(k.PropagationMethod) || k.Source.Secret == nil || k.Source.Secret.SecretName == "" {
			continue
		}
		name := k.Source.Secret.SecretName + "-access-cred"
		if err := layout.CheckName(name); err != nil {
			return nil, fmt.Errorf("accessCredentials[%d].sshPublicKey.source.secret.secretName: %w", i, err)
		}
		files, err := readSourceDir(p.Layout.SecretSource(name))
		if err != nil {
			return nil, fmt.Errorf("accessCredentials[%d] secret %s: %w", i, k.Source.Secret.SecretName, err)
		}
		for _, f := range files {
			if len(f.Data) == 0 || strings.Contains(f.Name, "/") {
				continue
			}
			keys[strconv.Itoa(len(keys))] = string(f.Data)
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	return keys, nil
}

// firmwareUUID is the instance identity KubeVirt uses: the firmware UUID the
// webhook always sets. Without one, a UUID derived from namespace and name
// keeps the identity stable across restarts (cloud-init reruns its
// first-boot modules when it changes).
func firmwareUUID(vmi *v1.VirtualMachineInstance) string {
	if vmi.Spec.Domain.Firmware != nil && vmi.Spec.Domain.Firmware.UUID != "" {
		return string(vmi.Spec.Domain.Firmware.UUID)
	}
	return uuid.NewSHA1(uuid.NameSpaceOID, []byte("virtlauncher/"+vmi.Namespace+"/"+vmi.Name)).String()
}

func instancetype(vmi *v1.VirtualMachineInstance) string {
	if t := vmi.Annotations[v1.ClusterInstancetypeAnnotation]; t != "" {
		return t
	}
	return vmi.Annotations[v1.InstancetypeAnnotation]
}
