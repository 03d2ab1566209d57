package shim

import "google.golang.org/protobuf/proto"

// twin converts a message into its wire twin: API v2 gives each RPC its own
// request and response types (buf STANDARD), so a few are the same fields
// under two names (ExecuteRequest and ExecuteSessionRequest, ExecRequest and
// ExecStreamRequest, Output and LogsResponse). Both are built from one
// converter rather than two copies of it; the round trip costs a copy of a
// small message.
func twin[T proto.Message](from proto.Message, to T) T {
	b, err := proto.Marshal(from)
	if err == nil {
		err = proto.Unmarshal(b, to)
	}
	if err != nil {
		// Both sides are generated from field-for-field copies; a failure
		// here is a programming error, not input.
		panic("shim: " + string(from.ProtoReflect().Descriptor().FullName()) + " is not the wire twin of " + string(to.ProtoReflect().Descriptor().FullName()) + ": " + err.Error())
	}
	return to
}
