package disks

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	v1 "kubevirt.io/api/core/v1"
)

// Volume labels of config ISOs, as KubeVirt writes them.
const (
	ConfigLabel  = "cfgdata"
	SysprepLabel = "unattendCD"
)

// configISO builds the ISO of a configMap, secret, downwardAPI,
// serviceAccount or sysprep volume from the directory the pod mounts.
func (p *Preparer) configISO(vol *v1.Volume) error {
	l := p.Layout
	var kind, src, dst, label string
	switch {
	case vol.ConfigMap != nil:
		kind, src, dst, label = "configMap", l.ConfigMapSource(vol.Name), l.ConfigMapISO(vol.Name), vol.ConfigMap.VolumeLabel
	case vol.Secret != nil:
		kind, src, dst, label = "secret", l.SecretSource(vol.Name), l.SecretISO(vol.Name), vol.Secret.VolumeLabel
	case vol.DownwardAPI != nil:
		kind, src, dst, label = "downwardAPI", l.DownwardAPISource(vol.Name), l.DownwardAPIISO(vol.Name), vol.DownwardAPI.VolumeLabel
	case vol.ServiceAccount != nil:
		kind, src, dst = "serviceAccount", l.ServiceAccountSource(), l.ServiceAccountISO()
	case vol.Sysprep != nil:
		if vol.Sysprep.ConfigMap == nil && vol.Sysprep.Secret == nil {
			return errors.New("sysprep: configMap or secret is required")
		}
		kind, src, dst, label = "sysprep", l.SysprepSource(vol.Name), l.SysprepISO(vol.Name), SysprepLabel
	default:
		return fmt.Errorf("volume %s is not a config volume", vol.Name)
	}
	if label == "" {
		label = ConfigLabel
	}
	if fi, err := os.Stat(src); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: source directory %s does not exist", kind, src)
		}
		return fmt.Errorf("%s: %w", kind, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("%s: source %s is not a directory", kind, src)
	}
	files, err := readSourceDir(src)
	if err != nil {
		return fmt.Errorf("%s: %w", kind, err)
	}
	if vol.Sysprep != nil && !hasUnattend(files) {
		return fmt.Errorf("sysprep: %s holds neither autounattend.xml nor unattend.xml", src)
	}
	return p.writeISO(dst, label, files)
}

func hasUnattend(files []isoFile) bool {
	for _, f := range files {
		if n := strings.ToLower(f.Name); n == "autounattend.xml" || n == "unattend.xml" {
			return true
		}
	}
	return false
}
