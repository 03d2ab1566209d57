package approval

import (
	"context"
	"errors"
	"testing"
)

func TestAsk(t *testing.T) {
	boom := errors.New("client gone")
	answer := func(ok, supported bool, err error) Approver {
		return func(context.Context, string) (bool, bool, error) { return ok, supported, err }
	}
	for _, tc := range []struct {
		name string
		a    Approver
		want Answer
		err  error
	}{
		{"approved", answer(true, true, nil), Approved, nil},
		{"declined", answer(false, true, nil), Declined, nil},
		{"no elicitation", answer(true, false, nil), CannotAsk, nil},
		{"nobody", nil, CannotAsk, nil},
		{"failed", answer(true, true, boom), Failed, boom},
	} {
		got, err := Ask(context.Background(), tc.a, "allow?")
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("%s: %v %v, want %v %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}
