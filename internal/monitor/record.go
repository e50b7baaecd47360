package monitor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
)

// RestartRecord is what the monitor keeps of the launcher restarts it
// made, in the pod's private directory (layout.LauncherRestarts): the
// figure people look for when a launcher crashed, without reading logs.
type RestartRecord struct {
	Count  int       `json:"count"`
	Last   time.Time `json:"last"`
	Reason string    `json:"reason"`
}

// maxRecord bounds what ReadRestarts reads: the file lies in a directory
// the launcher's user writes, and the reader may be root.
const maxRecord = 4 << 10

// writeRestarts replaces the record (atomically, never through a link).
func writeRestarts(privateDir string, r RestartRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return safefs.WriteFile(layout.Layout{PrivateDir: privateDir}.LauncherRestarts(), b, 0o644)
}

// ReadRestarts reads the record a pod's monitor keeps under privateDir;
// ok is false when there is none (no restart yet). It follows no link and
// reads a bounded amount, so a launcher's user cannot make a root reader
// read a device or a huge file.
func ReadRestarts(privateDir string) (r RestartRecord, ok bool, err error) {
	path := layout.Layout{PrivateDir: privateDir}.LauncherRestarts()
	d, err := safefs.Open(privateDir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return RestartRecord{}, false, nil
		}
		return RestartRecord{}, false, fmt.Errorf("launcher restarts: %w", err)
	}
	defer d.Close()
	f, err := d.OpenRegular(filepath.Base(path))
	if errors.Is(err, fs.ErrNotExist) {
		return RestartRecord{}, false, nil
	}
	if err != nil {
		return RestartRecord{}, false, fmt.Errorf("launcher restarts: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxRecord+1))
	if err != nil {
		return RestartRecord{}, false, fmt.Errorf("launcher restarts %s: %w", path, err)
	}
	if len(b) > maxRecord {
		return RestartRecord{}, false, fmt.Errorf("launcher restarts %s: larger than %d bytes", path, maxRecord)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return RestartRecord{}, false, fmt.Errorf("launcher restarts %s: %w", path, err)
	}
	return r, true, nil
}

// restartsOffForVMI reports whether the launcher left the marker saying
// that its VMI asks for no restarts.
func restartsOffForVMI(privateDir string) bool {
	_, err := os.Lstat(layout.Layout{PrivateDir: privateDir}.LauncherRestartsOff())
	return err == nil
}
