// Package libnbd stands in for libnbd's Go bindings, which the Go module
// proxy does not serve: KubeVirt's launcher links them only for its NBD
// client (VM backup and export), which the side-by-side bench never uses.
// Every call fails.
package libnbd

import "errors"

var errStub = errors.New("libnbd: not available in this build (a stand-in for the bench)")

const (
	CONTEXT_BASE_ALLOCATION          = "base:allocation"
	CONTEXT_QEMU_DIRTY_BITMAP        = "qemu:dirty-bitmap:"
	STATE_HOLE                uint32 = 1
	STATE_ZERO                uint32 = 2
	STATE_DIRTY               uint32 = 1
)

type LibnbdExtent struct {
	Length uint64
	Flags  uint64
}

type Libnbd struct{}

type BlockStatus64Callback func(metacontext string, offset uint64, entries []LibnbdExtent, err *int) int

type BlockStatus64Optargs struct{}
type PreadOptargs struct{}

func Create() (*Libnbd, error)                            { return nil, errStub }
func (*Libnbd) Close()                                    {}
func (*Libnbd) AddMetaContext(string) error               { return errStub }
func (*Libnbd) CanMetaContext(string) (bool, error)       { return false, errStub }
func (*Libnbd) GetSize() (uint64, error)                  { return 0, errStub }
func (*Libnbd) SetExportName(string) error                { return errStub }
func (*Libnbd) ConnectUnix(string) error                  { return errStub }
func (*Libnbd) Pread([]byte, uint64, *PreadOptargs) error { return errStub }
func (*Libnbd) BlockStatus64(uint64, uint64, BlockStatus64Callback, *BlockStatus64Optargs) error {
	return errStub
}
