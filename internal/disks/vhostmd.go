package disks

import (
	"encoding/binary"
	"fmt"
	"os"
)

// The downwardMetrics volume is a disk in vhostmd's on-disk layout, which
// the guest's vm-dump-metrics reads: a 16-byte big-endian header
// (signature "mvbd", a busy flag, the body's byte sum, the body's length)
// and the metrics XML after it, in a file of vhostmdSize bytes. The
// launcher makes it with no metrics yet; virt-handler rewrites it with the
// host's and the VM's figures while the VM runs (KubeVirt v1.9: the
// launcher's CreateDownwardMetricDisk, the handler's metrics collector).
const (
	vhostmdSize    = 256 << 10
	vhostmdHeader  = 16
	vhostmdMaxBody = vhostmdSize - 24 // KubeVirt's bound on the body
)

// vhostmdEmpty is the body of a disk with no metrics yet, as KubeVirt
// writes it (its XML, then a newline vm-dump-metrics leaves out).
const vhostmdEmpty = "<metrics></metrics>\n"

// vhostmdDisk makes the downwardMetrics disk with no metrics in it. An
// existing one is replaced, as KubeVirt's launcher rewrites it at each
// start: its metrics are the handler's to write again.
func (p *Preparer) vhostmdDisk() error {
	return p.createAtomic(p.Layout.DownwardMetricsDisk(), imageMode, func(tmp *os.File) error {
		return writeVhostmd(tmp, []byte(vhostmdEmpty))
	})
}

// writeVhostmd writes body into f in vhostmd's layout, at its full size.
func writeVhostmd(f *os.File, body []byte) error {
	if len(body) > vhostmdMaxBody {
		return fmt.Errorf("vhostmd metrics of %d bytes: at most %d fit", len(body), vhostmdMaxBody)
	}
	var sum int32
	for _, b := range body {
		sum += int32(b)
	}
	h := make([]byte, vhostmdHeader, vhostmdHeader+len(body))
	copy(h, "mvbd")
	binary.BigEndian.PutUint32(h[4:], 0) // not busy
	binary.BigEndian.PutUint32(h[8:], uint32(sum))
	binary.BigEndian.PutUint32(h[12:], uint32(len(body)))
	if _, err := f.Write(append(h, body...)); err != nil {
		return fmt.Errorf("write vhostmd disk: %w", err)
	}
	if err := f.Truncate(vhostmdSize); err != nil {
		return fmt.Errorf("size vhostmd disk: %w", err)
	}
	return nil
}
