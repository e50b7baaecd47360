package launchertest

import (
	"os"

	"github.com/virtlauncher/virtlauncher/internal/notify/notifytest"
)

// Notify plays virt-handler's end of the pod's notify pipe (the share
// dir's domain-notify-pipe.sock): a notifytest server, its socket given to
// the launcher's user as virt-handler gives it to the pod's (uid 107 in
// KubeVirt). Stopped at the test's end.
func (p *Pod) Notify(o notifytest.Options) *notifytest.Server {
	p.T.Helper()
	s, err := notifytest.StartWith(p.Layout.NotifySocket(), o)
	if err != nil {
		p.T.Fatal(err)
	}
	p.T.Cleanup(s.Stop)
	Must(p.T, os.Chown(p.Layout.NotifySocket(), int(p.Env.Cred.Uid), int(p.Env.Cred.Gid)))
	return s
}
