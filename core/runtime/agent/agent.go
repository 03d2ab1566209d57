// Package agent is mcp-forge-agent, the program the Kubernetes runtime
// runs in its sandbox pods in place of anything of the user's image: the
// sandbox container's PID 1 (init), the wrapper of an exec (exec, kill),
// the keeper's file service (serve), and the relays of unix sockets
// between the pod and the core (dial, listen). An init container copies
// the static binary (install) from the project's own small image into an
// emptyDir that the pod's other containers mount read-only, so a user's
// image needs nothing of its own (no perl, no shell) for it.
//
// The package holds both ends of its protocols (proto.go): the core's
// side encodes requests with the same types the agent decodes. It imports
// nothing of the rest of the module: it is a static binary's code.
package agent

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Binary is the agent's program name, and its file name in the pod.
const Binary = "mcp-forge-agent"

// Usage lists the commands.
const Usage = `usage: mcp-forge-agent COMMAND [ARGS]
  init OUTDIR -- CMD...   PID 1 of the sandbox: run CMD, capture its output in OUTDIR
  idle                    PID 1 of the keeper: reap, exit on SIGTERM
  exec DIR -- CMD...      an exec: environment from stdin, own process group, then CMD
  kill SIG TARGET         kill(2) TARGET (pid, -pgid, -1) with SIG (TERM, KILL, ...)
  serve WSDIR [OUTDIR]    the file service on stdin and stdout (OUTDIR: init's)
  dial PATH               relay the unix socket PATH to stdin and stdout
  listen PATH...          listen on unix sockets, carry their connections as frames
  install DEST            copy this binary to DEST (an init container's job)
  forward SOCK PORT -- CMD...
                          network by host name: serve 127.0.0.1:PORT to SOCK, then run CMD
`

// Main runs the command in args (without the program name) and answers
// the exit code.
func Main(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, Usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	// tail is what follows a "--" after n leading arguments.
	tail := func(n int) ([]string, []string, bool) {
		if len(rest) < n+1 || rest[n] != "--" {
			return nil, nil, false
		}
		return rest[:n], rest[n+1:], true
	}
	switch cmd {
	case "init":
		if head, argv, ok := tail(1); ok {
			return Init(head[0], argv)
		}
	case "exec":
		if head, argv, ok := tail(1); ok {
			return Exec(head[0], argv)
		}
	case "kill":
		if len(rest) == 2 {
			return Kill(rest[0], rest[1])
		}
	case "idle":
		sigs := make(chan os.Signal, 16)
		signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGCHLD)
		reapAll(sigs)
		return 0
	case "serve":
		if len(rest) == 1 || len(rest) == 2 {
			f, err := OpenFiles(rest[0], append(rest[1:], "")[0])
			if err == nil {
				err = f.Serve(os.Stdin, os.Stdout)
			}
			return report(err)
		}
	case "dial":
		if len(rest) == 1 {
			return Dial(rest[0], os.Stdin, os.Stdout)
		}
	case "listen":
		if len(rest) > 0 {
			return report(Listen(rest, os.Stdin, os.Stdout))
		}
	case "install":
		if len(rest) == 1 {
			return report(install(rest[0]))
		}
	case "forward":
		if head, argv, ok := tail(2); ok {
			return Forward(head[0], head[1], argv)
		}
	case "forward-serve":
		if len(rest) == 1 {
			return forwardServe(rest[0])
		}
	}
	fmt.Fprint(os.Stderr, Usage)
	return 2
}

func report(err error) int {
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", Binary, err)
		return 1
	}
	return 0
}

// install copies the running binary to dest (mode 0555), replacing it.
func install(dest string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	src, err := os.Open(exe)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o555); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dest)
}
