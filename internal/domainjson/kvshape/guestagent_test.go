package kvshape

import "testing"

// TestGuestAgentDecodeStrict: the decoders refuse keys KubeVirt's types do
// not have or spell differently, so the launcher tests can rely on them.
func TestGuestAgentDecodeStrict(t *testing.T) {
	cases := []struct {
		name string
		dec  func([]byte) error
		in   string
		ok   bool
	}{
		{"info ok", func(b []byte) error { _, err := DecodeGuestInfo(b); return err }, `{"guestAgentVersion":"8.1","os":{"id":"debian"},"fsInfo":{"disks":[]}}`, true},
		{"info wrong case", func(b []byte) error { _, err := DecodeGuestInfo(b); return err }, `{"GAVersion":"8.1"}`, false},
		{"info unknown key", func(b []byte) error { _, err := DecodeGuestInfo(b); return err }, `{"os":{"distro":"x"}}`, false},
		{"users ok", func(b []byte) error { _, err := DecodeUsers(b); return err }, `[{"userName":"root","loginTime":1.5}]`, true},
		{"users wrong key", func(b []byte) error { _, err := DecodeUsers(b); return err }, `[{"user":"root"}]`, false},
		{"users wrong type", func(b []byte) error { _, err := DecodeUsers(b); return err }, `{"userName":"root"}`, false},
		{"fs ok", func(b []byte) error { _, err := DecodeFilesystems(b); return err }, `[{"diskName":"vda1","mountPoint":"/","totalBytes":10}]`, true},
		{"fs wrong key", func(b []byte) error { _, err := DecodeFilesystems(b); return err }, `[{"mountpoint":"/"}]`, false},
	}
	for _, c := range cases {
		err := c.dec([]byte(c.in))
		if (err == nil) != c.ok {
			t.Errorf("%s: %s: err=%v, want ok=%v", c.name, c.in, err, c.ok)
		}
	}
}
