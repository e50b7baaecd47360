package plan

import (
	"fmt"
	"net"
	"net/netip"
	"runtime"

	"github.com/vishvananda/netns"
)

// InNS runs fn on a dedicated OS thread that has entered the network
// namespace ns. Netlink sockets, tap devices, /proc/sys/net files and UDP
// sockets created by fn belong to ns. The thread goes back to its original
// namespace afterwards; if that fails the thread stays locked so the Go
// runtime discards it instead of reusing a thread in a foreign namespace.
// A zero or negative handle means the current namespace: fn runs in place.
func InNS(ns netns.NsHandle, fn func() error) error {
	if ns <= 0 {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("get current netns: %w", err)
			return // thread stays locked and is discarded
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("enter netns: %w", err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- fmt.Errorf("return to original netns: %w (after: %v)", err, ferr)
			return // locked: the runtime terminates this thread
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// IPNet is p as netlink's address type wants it (the address, not the
// masked network).
func IPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
