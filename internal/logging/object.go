package logging

import (
	"log/slog"

	"k8s.io/apimachinery/pkg/types"
)

// Object is the identity of a Kubernetes object; every API type with
// ObjectMeta (a *v1.VirtualMachineInstance, for one) satisfies it.
type Object interface {
	GetName() string
	GetNamespace() string
	GetUID() types.UID
}

// KindVMI is the kind KubeVirt writes on VMI-scoped lines.
const KindVMI = "VirtualMachineInstance"

// ForObject returns log with the kind, name, namespace and uid keys that
// KubeVirt puts on object-scoped lines.
func ForObject(log *slog.Logger, kind string, obj Object) *slog.Logger {
	return log.With(
		slog.String("kind", kind),
		slog.String("name", obj.GetName()),
		slog.String("namespace", obj.GetNamespace()),
		slog.String("uid", string(obj.GetUID())),
	)
}

// ForVMI is ForObject for a VirtualMachineInstance.
func ForVMI(log *slog.Logger, vmi Object) *slog.Logger {
	return ForObject(log, KindVMI, vmi)
}

// Subcomponent returns log for lines relayed from another program
// ("libvirt", "qemu").
func Subcomponent(log *slog.Logger, name string) *slog.Logger {
	return log.With(slog.String("subcomponent", name))
}
