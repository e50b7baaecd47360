package launcher

import "testing"

func TestLibvirtArch(t *testing.T) {
	for _, tc := range []struct{ goarch, want string }{
		{"amd64", "x86_64"},
		{"arm64", "aarch64"},
		{"386", "i686"},
		{"s390x", "s390x"},
		{"ppc64le", "ppc64le"},
	} {
		if got := libvirtArch(tc.goarch); got != tc.want {
			t.Errorf("libvirtArch(%s) = %s, want %s", tc.goarch, got, tc.want)
		}
	}
}
