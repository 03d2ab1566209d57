package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/bridge"
)

const rImage = "localhost/mcp-forge/r:4.2"

const rEndToEnd = `
expect <- function(cls, expr) {
  e <- tryCatch({ expr; NULL }, condition = function(e) e)
  if (!inherits(e, cls)) stop(sprintf("want %s, got %s", cls, if (is.null(e)) "no condition" else paste(class(e), collapse = "/")))
  e
}
stopifnot(grepl("The sum of 20 and 22 is 42", everything$get_sum(a = 20, b = 22)))
stopifnot(grepl("The sum of 1 and 2 is 3", everything$get_sum(1, 2)))
s <- everything$get_structured_content(location = "Chicago")
stopifnot(is.list(s), !is.null(s$temperature))
e <- expect("forge_tool_invalid", everything$get_structured_content(location = "Paris"))
stopifnot(grepl("must be one of", conditionMessage(e)))
e <- expect("forge_tool_invalid", everything$get_sum(a = 1))
stopifnot(grepl("'b' is required", conditionMessage(e)))
e <- expect("forge_tool_error", edge$fail_env(name = "NOPE"))
stopifnot(identical(conditionMessage(e), "failed with "), inherits(e, "forge_bridge_error"))
e <- expect("forge_tool_denied", edge$crash())
stopifnot(grepl("denied by policy", conditionMessage(e)))
invisible(expect("forge_tool_budget", edge$pid()))
invisible(expect("forge_tool_timeout", edge$hang()))
stopifnot(identical(edge$get_user(), "get_user"))
img <- everything$get_tiny_image()
stopifnot(length(attr(img, "images")) == 1)
n <- 50
t <- system.time(for (i in seq_len(n)) stopifnot(identical(everything$echo(message = paste("loop", i)), paste("Echo: loop", i))))
f <- edge[[Sys.getenv("HOSTILE_NAME")]]
doc <- attr(f, "doc")
stopifnot(startsWith(doc, "\"\"\"; import os; os.system('touch /tmp/forge-pwned')\n` + "`" + `r system("), names(formals(f))[1] == "class_")
stopifnot(!file.exists("/tmp/forge-pwned"))
mode <- if (Sys.getenv("FORGE_TOOLS_R_ONESHOT") == "1") "a process per call" else "one helper per R process"
cat(sprintf("OK %.1f ms per call (%s)\n", 1000 * t[["elapsed"]] / n, mode))
`

// The generated R in the R image (no Rscript on the host): sourced through
// r/profile.R, calling through the helper and a core-like socket server
// that forwards to the real bridge.
func TestGeneratedREndToEnd(t *testing.T) {
	if os.Getenv("FORGE_E2E") != "1" {
		t.Skip("runs the generated R in a Podman container: end-to-end tier, set FORGE_E2E=1 (make test does)")
	}
	podman, err := exec.LookPath("podman")
	if err == nil {
		err = exec.Command(podman, "image", "exists", rImage).Run()
	}
	if err != nil {
		msg := fmt.Sprintf("podman with image %s is needed to run the generated R (make setup builds it): %v", rImage, err)
		if os.Getenv("FORGE_E2E") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	b, _, hostile := genBridge(t)
	grant := []string{"everything.get_sum", "everything.get_structured_content", "everything.echo", "everything.get_tiny_image",
		"edge.fail_env", "edge.crash", "edge.pid", "edge.hang", "edge.get_user", "edge." + hostile}
	files, err := b.Generate(context.Background(), bridge.GenerateRequest{Language: "r", Tools: grant})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, files)
	writeFiles(t, dir, map[string][]byte{"test.R": []byte(rEndToEnd)})
	startFakeCore(t, b, filepath.Join(dir, bridge.SocketName), t.TempDir())
	name := fmt.Sprintf("mcpbridge-rtest-%d", time.Now().UnixNano())
	cmd := exec.Command(podman, "run", "--rm", "--network", "none", "--name", name,
		"-v", dir+":"+bridge.SandboxDir+":ro",
		"-e", bridge.EnvSocket+"="+bridge.SandboxDir+"/"+bridge.SocketName,
		"-e", "R_PROFILE_USER="+bridge.RProfile,
		"-e", "HOSTILE_NAME="+hostile,
		rImage, "sh", "-c", "Rscript "+bridge.SandboxDir+"/test.R && FORGE_TOOLS_R_ONESHOT=1 Rscript "+bridge.SandboxDir+"/test.R")
	t.Cleanup(func() { _ = exec.Command(podman, "rm", "-f", "--ignore", name).Run() })
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Count(string(out), "OK ") != 2 || strings.Count(string(out), "\n") != 2 {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(string(out)))
}

const pyImage = "localhost/mcp-forge/python:3.11"

// The same Python client test in the Python sandbox image (Python 3.11, the
// grant directory mounted read-only, no network), as a run would see it.
func TestGeneratedPythonInImage(t *testing.T) {
	if os.Getenv("FORGE_E2E") != "1" {
		t.Skip("runs the generated Python in a Podman container: end-to-end tier, set FORGE_E2E=1 (make test does)")
	}
	podman, err := exec.LookPath("podman")
	if err == nil {
		err = exec.Command(podman, "image", "exists", pyImage).Run()
	}
	if err != nil {
		msg := fmt.Sprintf("podman with image %s is needed (make setup builds it): %v", pyImage, err)
		if os.Getenv("FORGE_E2E") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	b, _, _ := genBridge(t)
	grant := []string{"everything.get_sum", "everything.get_structured_content", "everything.echo", "everything.trigger_long_running_operation",
		"everything.get_tiny_image", "edge.fail_env", "edge.crash", "edge.pid", "edge.hang", "edge.big", "edge.get_user"}
	files, err := b.Generate(context.Background(), bridge.GenerateRequest{Language: "python", Tools: grant})
	if err != nil {
		t.Fatal(err)
	}
	dir, out := t.TempDir(), t.TempDir()
	for _, d := range []string{dir, out} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFiles(t, dir, files)
	writeFiles(t, dir, map[string][]byte{"test.py": []byte(pyEndToEnd)})
	fc := startFakeCore(t, b, filepath.Join(dir, bridge.SocketName), out)
	name := fmt.Sprintf("mcpbridge-pytest-%d", time.Now().UnixNano())
	cmd := exec.Command(podman, "run", "--rm", "--network", "none", "--read-only", "--name", name,
		"-v", dir+":"+bridge.SandboxDir+":ro", "-v", out+":"+out+":ro",
		"-e", bridge.EnvSocket+"="+bridge.SandboxDir+"/"+bridge.SocketName,
		"-e", "PYTHONPATH="+bridge.PythonDir, "-e", "PYTHONDONTWRITEBYTECODE=1",
		pyImage, "python3", bridge.SandboxDir+"/test.py")
	t.Cleanup(func() { _ = exec.Command(podman, "rm", "-f", "--ignore", name).Run() })
	o, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(o)) != "OK" {
		t.Fatalf("%v\n%s", err, o)
	}
	if got := fc.requests.Load(); got != 75 {
		t.Errorf("the core saw %d requests, want 75", got)
	}
}
