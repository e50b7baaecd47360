package cmdserver

import (
	"context"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
)

// The RPCs below are features virtlauncher does not implement (SEV).
// Each answers a failure Response with a non-empty message, which
// virt-handler reports as a failed operation; none pretends to succeed.

func (c *cmdServer) GetSEVInfo(context.Context, *cmdv1.EmptyRequest) (*cmdv1.SEVInfoResponse, error) {
	return &cmdv1.SEVInfoResponse{Response: fail(notSupported("GetSEVInfo"))}, nil
}

func (c *cmdServer) GetLaunchMeasurement(context.Context, *cmdv1.VMIRequest) (*cmdv1.LaunchMeasurementResponse, error) {
	return &cmdv1.LaunchMeasurementResponse{Response: fail(notSupported("GetLaunchMeasurement"))}, nil
}

func (c *cmdServer) InjectLaunchSecret(context.Context, *cmdv1.InjectLaunchSecretRequest) (*cmdv1.Response, error) {
	return fail(notSupported("InjectLaunchSecret")), nil
}
