package cmdserver

import (
	"time"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
)

// WithMessageArrival sets the bound on reading a VMI-carrying call's
// message (messageArrival), so that a test need not wait 10 s for it.
func WithMessageArrival(d time.Duration) Option { return func(s *Server) { s.arrival = d } }

// Handlers is the server's Cmd service, for the fuzz target to call its
// handlers without a socket.
func Handlers(s *Server) cmdv1.CmdServer { return &cmdServer{s: s} }

// DecodeVMI is decodeVMI, the handlers' reading of a VMI's JSON.
var DecodeVMI = decodeVMI
