package procid

import (
	"os"
	"os/exec"
	"testing"
	"time"
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

// A process that has exited but is not reaped yet is not alive.
func TestZombieIsNotAlive(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	id := Of(cmd.Process.Pid)
	deadline := time.Now().Add(10 * time.Second)
	for state(cmd.Process.Pid) != "Z" {
		if time.Now().After(deadline) {
			t.Fatalf("the child did not become a zombie (state %q)", state(cmd.Process.Pid))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if Alive(id) {
		t.Fatal("a zombie counts as alive")
	}
}
