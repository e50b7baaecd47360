package standalone

import (
	"slices"

	"github.com/virtlauncher/virtlauncher/internal/userstorage"
)

// The user storage (userstorage) as the session uses it.

// hostPaths is the run's: the --allow-host-path directories and, for a
// guest taken over by migration, the directories of its source's hostDisks
// (that run was allowed them; the manifest is the one it ran).
func (cfg *session) hostPaths() userstorage.HostPaths {
	dirs := slices.Concat(cfg.AllowHostPaths, cfg.guest.hostDirs())
	return userstorage.HostPaths{Dirs: dirs, Owner: cfg.HostPathOwner}
}

// store is the volume store as the run uses it.
func (cfg *session) store() userstorage.Store {
	return userstorage.Store{Dir: cfg.VolumeStore, RecordDir: cfg.RecordDir, ImportCache: cfg.ImportCache,
		ImageCache: cfg.ImageCache, Status: cfg.progressOut()}
}
