package procid

import (
	"os"
	"testing"
)

func TestAlive(t *testing.T) {
	tests := []struct {
		owner string
		want  bool
	}{
		{Of(os.Getpid()), true},
		{Of(os.Getpid()) + "1", false}, // same pid, another start time
		{"dead-1", false},
		{"0-0", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := Alive(tt.owner); got != tt.want {
			t.Errorf("Alive(%q) = %v, want %v", tt.owner, got, tt.want)
		}
	}
}
