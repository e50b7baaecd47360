package kvshape

import (
	"errors"
	"fmt"

	v1 "kubevirt.io/api/core/v1"
	kjson "sigs.k8s.io/json"
)

// The guest-agent RPCs (GetGuestInfo, GetUsers, GetFilesystems) carry
// JSON of kubevirt.io/api types, which virt-handler decodes into those very
// types; decoding into them strictly checks our keys against KubeVirt's.

// DecodeGuestInfo decodes GetGuestInfo's guestInfoResponse.
func DecodeGuestInfo(data []byte) (*v1.VirtualMachineInstanceGuestAgentInfo, error) {
	var v v1.VirtualMachineInstanceGuestAgentInfo
	return &v, strict("GuestAgentInfo", data, &v)
}

// DecodeUsers decodes GetUsers' guestUserListResponse.
func DecodeUsers(data []byte) ([]v1.VirtualMachineInstanceGuestOSUser, error) {
	var v []v1.VirtualMachineInstanceGuestOSUser
	return v, strict("guest user list", data, &v)
}

// DecodeFilesystems decodes GetFilesystems' guestFilesystemsResponse.
func DecodeFilesystems(data []byte) ([]v1.VirtualMachineInstanceFileSystem, error) {
	var v []v1.VirtualMachineInstanceFileSystem
	return v, strict("guest filesystem list", data, &v)
}

func strict(what string, data []byte, v any) error {
	strictErrs, err := kjson.UnmarshalStrict(data, v)
	if err != nil {
		return fmt.Errorf("decode as KubeVirt %s: %w", what, err)
	}
	if len(strictErrs) > 0 {
		return fmt.Errorf("decode as KubeVirt %s: %w", what, errors.Join(strictErrs...))
	}
	return nil
}
