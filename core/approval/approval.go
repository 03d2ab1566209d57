// Package approval is how the core asks the user to allow something a run
// asked for (MCP elicitation): a network grant, a tool call from the
// sandbox. One Approver type serves every such question, and Ask says
// which of the four answers came back.
package approval

import "context"

// Approver asks the user message; supported is false when the client
// cannot be asked (no elicitation).
type Approver func(ctx context.Context, message string) (approved, supported bool, err error)

// Answer is what came of asking.
type Answer int

const (
	Approved  Answer = iota
	Declined         // the user said no
	CannotAsk        // no client of the run can be asked (nil Approver, or no elicitation)
	Failed           // asking failed: the error says why
)

// Ask asks a (nil: nobody can be asked).
func Ask(ctx context.Context, a Approver, message string) (Answer, error) {
	if a == nil {
		return CannotAsk, nil
	}
	ok, supported, err := a(ctx, message)
	switch {
	case err != nil:
		return Failed, err
	case !supported:
		return CannotAsk, nil
	case !ok:
		return Declined, nil
	}
	return Approved, nil
}
