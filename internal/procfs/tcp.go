package procfs

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// TCPOwner returns the user id owning the TCP socket of this machine
// (the reader's network namespace) bound to local and connected to remote,
// as net/tcp or net/tcp6 lists it: the other end of a loopback connection
// a server accepted is found with local = the connection's remote address
// and remote = its local address.
func TCPOwner(procRoot string, local, remote netip.AddrPort) (uint32, error) {
	file := "tcp"
	if !local.Addr().Unmap().Is4() {
		file = "tcp6"
	}
	b, err := os.ReadFile(filepath.Join(procRoot, "net", file))
	if err != nil {
		return 0, err
	}
	return tcpOwner(b, local, remote)
}

func tcpOwner(table []byte, local, remote netip.AddrPort) (uint32, error) {
	sc := bufio.NewScanner(bytes.NewReader(table))
	sc.Scan() // the header
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 8 {
			continue
		}
		l, lerr := parseTCPAddr(f[1])
		r, rerr := parseTCPAddr(f[2])
		if lerr != nil || rerr != nil || l != unmap(local) || r != unmap(remote) {
			continue
		}
		uid, err := strconv.ParseUint(f[7], 10, 32)
		if err != nil {
			return 0, fmt.Errorf("tcp socket %s -> %s: uid %q: %w", local, remote, f[7], err)
		}
		return uint32(uid), nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no tcp socket %s -> %s", local, remote)
}

func unmap(a netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}

// parseTCPAddr reads "0100007F:1F90": the address in hex as the kernel
// holds it, 32-bit words in host order (little-endian here), and the port.
func parseTCPAddr(s string) (netip.AddrPort, error) {
	a, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("tcp address %q", s)
	}
	raw, err := hex.DecodeString(a)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("tcp address %q", s)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("tcp address %q: %w", s, err)
	}
	for i := 0; i < len(raw); i += 4 {
		binary.LittleEndian.PutUint32(raw[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	addr, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)), nil
}
