package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// authorizedKeysExecTimeout is how long each helper command KubeVirt runs
// in the guest for the file-based key fallback may take (getent, chown,
// chmod): 10 s, as KubeVirt's access credential manager gives them.
const authorizedKeysExecTimeout = 10 * time.Second

// WriteAuthorizedKeysFile is KubeVirt's fallback for agents that cannot
// set authorized keys themselves (qemu-guest-agent before 5.2 has no
// guest-ssh-add-authorized-keys, and an agent may have it disabled): the
// user's home, uid and gid come from `getent passwd USER` run in the
// guest, ~/.ssh/authorized_keys is read with guest-file-open/read/close,
// and only when it differs from the keys (joined by newlines, as KubeVirt
// writes them) is it rewritten through guest-file-write, owned by the
// user with mode 600 (chown and chmod run in the guest). As KubeVirt's, it
// does not create ~/.ssh.
func WriteAuthorizedKeysFile(ctx context.Context, run Runner, user string, keys []string) error {
	want := strings.Join(keys, "\n")
	home, owner, err := userHome(ctx, run, user)
	if err != nil {
		return err
	}
	path := home + "/.ssh/authorized_keys"
	cur, err := readGuestFile(ctx, run, path)
	exists := true
	switch {
	case err != nil && strings.Contains(err.Error(), "No such file or directory"):
		exists = false
	case err != nil:
		return err
	case cur == want:
		return nil
	}
	if exists {
		// Writable for us whatever its mode was.
		if err := setOwnerMode(ctx, run, path, owner); err != nil {
			return err
		}
	}
	if err := writeGuestFile(ctx, run, path, want); err != nil {
		return err
	}
	if !exists {
		return setOwnerMode(ctx, run, path, owner)
	}
	return nil
}

// userHome returns the user's home directory and "uid:gid" from the
// guest's passwd database.
func userHome(ctx context.Context, run Runner, user string) (home, owner string, err error) {
	out, err := Exec(ctx, run, "getent", []string{"passwd", user}, authorizedKeysExecTimeout)
	if err != nil {
		return "", "", fmt.Errorf("unable to detect home directory of user %s: %w", user, err)
	}
	f := strings.Split(strings.TrimSpace(out), ":")
	if len(f) < 6 || f[5] == "" {
		return "", "", fmt.Errorf("unable to detect home directory of user %s: passwd entry %q", user, out)
	}
	return f[5], f[2] + ":" + f[3], nil
}

func setOwnerMode(ctx context.Context, run Runner, path, owner string) error {
	if _, err := Exec(ctx, run, "chown", []string{owner, path}, authorizedKeysExecTimeout); err != nil {
		return fmt.Errorf("chown %s %s in the guest: %w", owner, path, err)
	}
	if _, err := Exec(ctx, run, "chmod", []string{"600", path}, authorizedKeysExecTimeout); err != nil {
		return fmt.Errorf("chmod 600 %s in the guest: %w", path, err)
	}
	return nil
}

// openGuestFile opens path in the guest (guest-file-open) and returns its
// handle.
func openGuestFile(ctx context.Context, run Runner, path, mode string) (int64, error) {
	req, err := json.Marshal(map[string]any{"execute": "guest-file-open", "arguments": map[string]any{"path": path, "mode": mode}})
	if err != nil {
		return 0, err
	}
	reply, err := run(ctx, string(req))
	if err != nil {
		return 0, fmt.Errorf("guest-file-open %s: %w", path, err)
	}
	var h int64
	if err := decodeReturn("guest-file-open", reply, &h); err != nil {
		return 0, err
	}
	return h, nil
}

func closeGuestFile(ctx context.Context, run Runner, path string, h int64) error {
	if _, err := run(ctx, fmt.Sprintf(`{"execute":"guest-file-close","arguments":{"handle":%d}}`, h)); err != nil {
		return fmt.Errorf("guest-file-close %s: %w", path, err)
	}
	return nil
}

// readGuestFile reads a file of the guest in one guest-file-read (the
// agent's default count, 48 KiB: an authorized_keys file).
func readGuestFile(ctx context.Context, run Runner, path string) (string, error) {
	h, err := openGuestFile(ctx, run, path, "r")
	if err != nil {
		return "", err
	}
	reply, err := run(ctx, fmt.Sprintf(`{"execute":"guest-file-read","arguments":{"handle":%d}}`, h))
	var got struct {
		Count  int    `json:"count"`
		BufB64 string `json:"buf-b64"`
	}
	if err == nil {
		err = decodeReturn("guest-file-read", reply, &got)
	} else {
		err = fmt.Errorf("guest-file-read %s: %w", path, err)
	}
	// The handle is closed whatever happened: the agent keeps it otherwise.
	if err := errors.Join(err, closeGuestFile(ctx, run, path, h)); err != nil {
		return "", err
	}
	if got.Count == 0 {
		return "", nil
	}
	data, err := base64.StdEncoding.DecodeString(got.BufB64)
	if err != nil {
		return "", fmt.Errorf("guest-file-read %s: %w", path, err)
	}
	return string(data), nil
}

// writeGuestFile replaces the contents of a file of the guest.
func writeGuestFile(ctx context.Context, run Runner, path, contents string) error {
	h, err := openGuestFile(ctx, run, path, "w")
	if err != nil {
		return err
	}
	req, err := json.Marshal(map[string]any{"execute": "guest-file-write",
		"arguments": map[string]any{"handle": h, "buf-b64": base64.StdEncoding.EncodeToString([]byte(contents))}})
	if err == nil {
		_, err = run(ctx, string(req))
	}
	if err != nil {
		err = fmt.Errorf("guest-file-write %s: %w", path, err)
	}
	return errors.Join(err, closeGuestFile(ctx, run, path, h))
}
