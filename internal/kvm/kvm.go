// Package kvm answers whether this process can use KVM. The launcher asks
// to choose between KVM and TCG; vlctl run asks to decide whether to pass
// --force-emulation. Both must apply the same test, so it lives here.
package kvm

import "os"

// Usable reports whether this process can open /dev/kvm read-write, which
// is what QEMU needs; the error says why not. It cannot tell a nested setup
// where guests open /dev/kvm but do not progress.
func Usable() error {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	// The open is the test; a failing close says nothing about KVM.
	_ = f.Close()
	return nil
}
