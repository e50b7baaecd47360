package cmdserver

import "time"

// WithMessageArrival sets the bound on reading a VMI-carrying call's
// message (messageArrival), so that a test need not wait 10 s for it.
func WithMessageArrival(d time.Duration) Option { return func(s *Server) { s.arrival = d } }
