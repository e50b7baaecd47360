package compute_test

import "github.com/virtlauncher/virtlauncher/internal/converter/convtest"

// priv is the VMI private directory of convtest.VMI() in the pod layout.
const priv = "/var/run/kubevirt-private/" + convtest.UID
