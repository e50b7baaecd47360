package cmdserver

import (
	"context"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// A call carrying a VMI costs far more than its message once decoded: the
// received bytes, the protobuf copy, the JSON tree vmi.ParseLenient checks,
// its re-encoding, the VirtualMachineInstance and validation's defaulted
// copy (about 60 MiB allocated for a message at MaxMessageSize). Such calls
// are therefore admitted before gRPC reads their message, by wrapping
// their method handlers: gRPC reads a unary call's message only when the
// handler asks for it. Admission has two steps:
//
//   - MaxVMICalls bounds the calls in flight; one more is refused at once
//     with ResourceExhausted, before any of its message is read (what the
//     client sent meanwhile is at most the stream's flow-control window).
//   - One admitted call at a time reads and decodes its message (the
//     decode slot); the others wait for it with their own context. The
//     slot is given back as soon as the VMI is decoded and checked, so the
//     calls waiting for the domain's operation lock hold only their decoded
//     VMIs, never a decoding.
//
// A caller whose message stalls holds the decode slot until its own
// deadline or messageArrival, whichever comes first.

// messageArrival bounds how long a call carrying a VMI may take to send
// its message once the launcher reads it. Over the local socket 4 MiB
// arrive in milliseconds; this is for a caller that stopped midway.
const messageArrival = 10 * time.Second

// streamWindow is the flow-control window of each call: what a client can
// send before the launcher reads the call's message, i.e. what a call
// waiting for the decode slot holds (gRPC's default, kept static: dynamic
// windows could grow it to 16 MiB per call). Reading a message opens the
// window to the message's size, so a large message still arrives at once.
const streamWindow = 64 << 10

// connWindow is each connection's flow-control window; received data is
// acknowledged as it arrives, so this only paces a fast sender.
const connWindow = 1 << 20

type decodeTicketKey struct{}

// decodeTicket is a call's hold on the decode slot; the call's handler
// gives it back once decoded (decoded), the admission wrapper at the
// latest when the call ends. Both run on the call's goroutine.
type decodeTicket struct {
	slot chan struct{}
	held bool
}

func (t *decodeTicket) release() {
	if t.held {
		t.held = false
		<-t.slot
	}
}

// decoded gives back the decode slot of the call ctx belongs to, if it
// holds it: its message is decoded and its bytes are no longer needed.
func decoded(ctx context.Context) {
	if t, ok := ctx.Value(decodeTicketKey{}).(*decodeTicket); ok {
		t.release()
	}
}

// admitVMICalls returns a copy of desc (the Cmd service, sd its
// descriptor) whose methods taking a request with a vmi field are
// admitted as described above.
func (s *Server) admitVMICalls(desc *grpc.ServiceDesc, sd protoreflect.ServiceDescriptor) *grpc.ServiceDesc {
	d := *desc
	d.Methods = slices.Clone(desc.Methods)
	for i, m := range d.Methods {
		md := sd.Methods().ByName(protoreflect.Name(m.MethodName))
		if md == nil || md.Input().Fields().ByName("vmi") == nil {
			continue
		}
		d.Methods[i].Handler = s.admit(m.MethodName, m.Handler)
	}
	return &d
}

// admit wraps one method handler: the call takes a token or is refused,
// and reads its message (dec) only while it holds the decode slot.
func (s *Server) admit(rpc string, h grpc.MethodHandler) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		select {
		case s.vmiCalls <- struct{}{}:
			defer func() { <-s.vmiCalls }()
		default:
			s.log.Warn("call refused: too many in flight", "rpc", rpc, "limit", MaxVMICalls)
			return nil, status.Errorf(codes.ResourceExhausted, "%s: %d calls carrying a VMI are in flight already; try again", rpc, MaxVMICalls)
		}
		t := &decodeTicket{slot: s.decodeSlot}
		defer t.release()
		ctx = context.WithValue(ctx, decodeTicketKey{}, t)
		return h(srv, ctx, func(m any) error {
			select {
			case s.decodeSlot <- struct{}{}:
				t.held = true
			case <-ctx.Done():
				return status.FromContextError(ctx.Err()).Err()
			}
			return s.receive(rpc, t, dec, m)
		}, ic)
	}
}

// receive reads the call's message into m (dec) within s.arrival: a
// caller without a deadline whose message stalls would otherwise hold the
// decode slot, and so every other call carrying a VMI, for good. When the
// bound passes the call fails; gRPC then ends its stream, which ends the
// read, and only then is the slot given back (the read holds what has
// arrived).
func (s *Server) receive(rpc string, t *decodeTicket, dec func(any) error, m any) error {
	done := make(chan error, 1)
	go func() { done <- dec(m) }()
	timer := time.NewTimer(s.arrival)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
	}
	t.held = false
	go func() {
		<-done
		<-t.slot
	}()
	s.log.Warn("call refused: its message did not arrive in time", "rpc", rpc, "limit", s.arrival.String())
	return status.Errorf(codes.DeadlineExceeded, "%s: the message did not arrive within %v", rpc, s.arrival)
}
