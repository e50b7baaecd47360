package cmdserver

import (
	"context"

	v1 "kubevirt.io/api/core/v1"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
)

// The calls virt-handler makes on a running VMI that usually have nothing
// to do here: they answer success when there is nothing to do, as
// KubeVirt's launcher does (cmd-server/server.go), and fail naming what
// virtlauncher cannot do otherwise.

// SyncVirtualMachineCPUs succeeds when the domain has the VMI's vCPUs.
func (c *cmdServer) SyncVirtualMachineCPUs(ctx context.Context, req *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return c.vmiOp(ctx, "SyncVirtualMachineCPUs", req, c.s.m.SyncVCPUs)
}

// SyncVirtualMachineMemory sets the hotplugged memory (virtio-mem) to the
// VMI's guest memory above its boot size.
func (c *cmdServer) SyncVirtualMachineMemory(ctx context.Context, req *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return c.vmiOp(ctx, "SyncVirtualMachineMemory", req, c.s.m.SyncMemory)
}

// HotplugHostDevices succeeds when no SR-IOV interface awaits a hotplug.
func (c *cmdServer) HotplugHostDevices(ctx context.Context, req *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return c.vmiOp(ctx, "HotplugHostDevices", req, c.s.m.HotplugHostDevices)
}

// SignalTargetPodCleanup: when this pod (POD_NAME) is the VMI's
// migration target, the launcher is told to give up waiting for the
// incoming domain and exit (KubeVirt's early exit); otherwise there is
// nothing to do. It answers success either way, as KubeVirt's does.
func (c *cmdServer) SignalTargetPodCleanup(ctx context.Context, req *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return c.vmiOp(ctx, "SignalTargetPodCleanup", req, func(_ context.Context, vmi *v1.VirtualMachineInstance) error {
		if isTargetPod(vmi, c.s.podName) {
			c.s.log.Info("signaled target pod to clean up", "pod", c.s.podName)
			c.s.m.AbandonTarget()
		}
		return nil
	})
}

// isTargetPod says whether the pod podName is v's migration target
// (empty: unknown, as KubeVirt treats an unset POD_NAME).
func isTargetPod(v *v1.VirtualMachineInstance, podName string) bool {
	ms := v.Status.MigrationState
	return podName != "" && ms != nil && ms.TargetPod == podName
}

// GetScreenshot returns the primary display's image as libvirt gives it.
func (c *cmdServer) GetScreenshot(ctx context.Context, req *cmdv1.VMIRequest) (*cmdv1.ScreenshotResponse, error) {
	var mime string
	var data []byte
	resp, err := c.vmiOp(ctx, "GetScreenshot", req, func(ctx context.Context, vmi *v1.VirtualMachineInstance) error {
		var err error
		mime, data, err = c.s.m.Screenshot(ctx, vmi)
		return err
	})
	if err != nil || !resp.GetSuccess() {
		return &cmdv1.ScreenshotResponse{Response: resp}, err
	}
	return &cmdv1.ScreenshotResponse{Response: resp, Mime: mime, Data: data}, nil
}
