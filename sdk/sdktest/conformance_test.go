package sdktest

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// wrong answers every run with the wrong output and no Go error.
type wrong struct{}

func (wrong) Capabilities(context.Context) (backend.Capabilities, error) {
	return backend.Capabilities{Languages: []string{"fake"}}, nil
}

func (wrong) Execute(context.Context, backend.ExecuteRequest) (backend.ExecuteResult, error) {
	return backend.ExecuteResult{Success: true, Stdout: "nope\n"}, nil
}

func TestHelperWrongBackend(t *testing.T) {
	if os.Getenv("SDKTEST_HELPER") != "1" {
		t.Skip("run by TestSuiteReportsWrongResults")
	}
	RunBackend(t, wrong{}, Snippets{Language: "fake", Print: "print"})
}

// A backend that returns wrong results fails the suite with a message; the
// concurrent subtest used to panic on err.Error() of a nil error.
func TestSuiteReportsWrongResults(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperWrongBackend$", "-test.v")
	cmd.Env = append(os.Environ(), "SDKTEST_HELPER=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the suite passed a backend that prints the wrong thing:\n%s", out)
	}
	s := string(out)
	if strings.Contains(s, "panic") || !strings.Contains(s, `concurrent run: want stdout "hello"`) || !strings.Contains(s, "--- FAIL: TestHelperWrongBackend/print") {
		t.Fatalf("want clear failures and no panic:\n%s", s)
	}
}
