package domain

import (
	"context"
	"fmt"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/screenshot"
)

// maxScreenshot bounds a screenshot: what gRPC lets virt-handler receive
// (4 MiB), less room for the rest of the message.
const maxScreenshot = 4<<20 - 4096

// screenshotTimeout bounds a screenshot when the caller's deadline is
// later or absent: under TCG one takes well under a second.
const screenshotTimeout = 15 * time.Second

// Screenshot is GetScreenshot: libvirt's virDomainScreenshot of the
// primary display, its data and MIME type passed on unchanged as KubeVirt's
// launcher does (manager.go GetScreenshot): "image/png" here, PPM
// ("image/x-portable-pixmap") from a QEMU that cannot write PNG.
//
// It takes no operation lock and never uses the shared connection: the
// screenshot's stream runs on a connection of its own (package screenshot
// says why), so however it ends, no other call waits for it.
func (m *Manager) Screenshot(ctx context.Context, v *v1.VirtualMachineInstance) (string, []byte, error) {
	if err := m.checkIdentity(v, false); err != nil {
		return "", nil, err
	}
	domName, _, _ := m.names()
	if domName == "" {
		return "", nil, fmt.Errorf("screenshot: no domain is defined")
	}
	ctx, cancel := context.WithTimeout(ctx, screenshotTimeout)
	defer cancel()
	return screenshot.Take(ctx, screenshot.Request{
		Socket: m.cfg.Socket,
		URI:    m.cfg.URI,
		Domain: domName,
		Limit:  maxScreenshot,
	})
}
