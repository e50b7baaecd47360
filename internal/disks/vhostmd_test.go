package disks

import (
	"context"
	"encoding/binary"
	"os"
	"testing"

	v1 "kubevirt.io/api/core/v1"
)

// readVhostmd reads a disk in vhostmd's layout as the guest's
// vm-dump-metrics and KubeVirt's reader do: the header, a body that is not
// busy and whose byte sum matches.
func readVhostmd(t *testing.T, path string) (size int64, body string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < vhostmdHeader || string(b[:4]) != "mvbd" {
		t.Fatalf("%s: no vhostmd signature: %q", path, b[:min(len(b), 16)])
	}
	flag, sum, n := int32(binary.BigEndian.Uint32(b[4:])), int32(binary.BigEndian.Uint32(b[8:])), int(binary.BigEndian.Uint32(b[12:]))
	if flag != 0 {
		t.Fatalf("%s: busy flag %d", path, flag)
	}
	if n > len(b)-vhostmdHeader {
		t.Fatalf("%s: body length %d beyond the file", path, n)
	}
	var got int32
	for _, c := range b[vhostmdHeader : vhostmdHeader+n] {
		got += int32(c)
	}
	if got != sum {
		t.Fatalf("%s: body sum %d, header says %d", path, got, sum)
	}
	return int64(len(b)), string(b[vhostmdHeader : vhostmdHeader+n])
}

// TestVhostmdDisk: the downwardMetrics volume's disk is made in vhostmd's
// layout, 256 KiB, with no metrics yet; made again, it is replaced; the
// undo of the Prepare that made it removes it; a body too big is refused.
func TestVhostmdDisk(t *testing.T) {
	p, _ := newPreparer(t)
	vmi := vmiWith(v1.Volume{Name: "metrics", VolumeSource: v1.VolumeSource{DownwardMetrics: &v1.DownwardMetricsVolumeSource{}}})
	undo, err := p.Prepare(context.Background(), vmi, nil)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	path := p.Layout.DownwardMetricsDisk()
	if size, body := readVhostmd(t, path); size != 256<<10 || body != "<metrics></metrics>\n" {
		t.Errorf("the disk: %d bytes, body %q; want 262144 bytes and empty metrics", size, body)
	}
	// The handler's metrics written into it, then a new start: replaced.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeVhostmd(f, []byte("<metrics><metric type='uint64' context='host'><name>PageInBytes</name><value>1</value></metric></metrics>\n")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, body := readVhostmd(t, path); body == vhostmdEmpty {
		t.Fatal("the metrics were not written")
	}
	if err := p.vhostmdDisk(); err != nil {
		t.Fatal(err)
	}
	if _, body := readVhostmd(t, path); body != vhostmdEmpty {
		t.Errorf("made again: body %q, want empty metrics", body)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != imageMode {
		t.Errorf("the disk's mode: %v, %v", fi, err)
	}
	f, _ = os.CreateTemp(t.TempDir(), "big")
	if err := writeVhostmd(f, make([]byte, vhostmdMaxBody+1)); err == nil {
		t.Errorf("a body too big was written")
	}
	f.Close()
	undo()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("after undo the disk is still there: %v", err)
	}
}
