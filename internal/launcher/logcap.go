package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

const (
	// serialLogMax caps the serial console log when no virtlogd runs, as
	// virtlogd's max_size does (the same 1 MiB and one backup as --virtlogd).
	serialLogMax = 1 << 20
	// logCapEvery is how often the log's size is checked: a guest writing
	// to its console at full speed adds well under 1 MiB/s under TCG.
	logCapEvery = 5 * time.Second
)

// capLog keeps a log that QEMU appends to at most max bytes (plus what one
// interval adds) until ctx ends. Without virtlogd nothing else bounds it, and
// a chatty guest would fill the pod's disk.
func capLog(ctx context.Context, path string, max int64, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rotated, err := rotateLog(path, max)
		if err != nil {
			log.Warn("cap the serial console log", "reason", err.Error())
		} else if rotated {
			log.Info("serial console log rotated", "path", path, "backup", path+".0")
		}
	}
}

// rotateLog moves the content of a log larger than max to path+".0"
// (replacing the previous backup) and truncates the log in place. QEMU
// opened it with O_APPEND, so its next write lands at the new end, and
// virt-tail starts over when it sees the file shrink. What is written
// between the copy and the truncation is lost; that window is a few
// microseconds.
func rotateLog(path string, max int64) (bool, error) {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if st.Size() <= max {
		return false, nil
	}
	src, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer src.Close()
	backup := path + ".0"
	tmp, err := os.CreateTemp(filepath.Dir(path), ".serial-log-*")
	if err != nil {
		return false, fmt.Errorf("backup of %s: %w", path, err)
	}
	_, cerr := io.Copy(tmp, src)
	if err := errors.Join(cerr, tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return false, fmt.Errorf("backup of %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), backup); err != nil {
		os.Remove(tmp.Name())
		return false, fmt.Errorf("backup of %s: %w", path, err)
	}
	if err := os.Truncate(path, 0); err != nil {
		return false, fmt.Errorf("truncate %s: %w", path, err)
	}
	return true, nil
}
