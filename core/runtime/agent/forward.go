package agent

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Path is where every sandbox has the agent: a Kubernetes pod's init
// container copies it there, the Podman runtime mounts the core's own copy
// there read-only. Code in the sandbox may run it; it holds nothing.
const Path = Dir + "/" + Binary

// Dir is the directory of Path (a pod's emptyDir for the agent).
const Dir = "/forge/agent"

// ForwardPatience is how long a connection the forwarder accepted waits
// for the core's socket: on a remote runtime its relay may come up just
// after the code starts.
const ForwardPatience = 5 * time.Second

// Forward is the in-sandbox end of network by host name: it listens on
// 127.0.0.1:port, leaves a child of its own serving that (carrying each
// connection to the unix socket sock, the core's egress proxy), and then
// becomes argv. It enforces nothing (the proxy does), so code that kills
// or replaces it gains nothing. It returns only on failure (125: the
// forwarder did not start, 127: argv could not run).
func Forward(sock string, port string, argv []string) int {
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		fmt.Fprintf(os.Stderr, "mcp-forge network: port %q is not a TCP port\n", port)
		return 125
	}
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: n})
	if err != nil {
		fmt.Fprintf(os.Stderr, "mcp-forge network: cannot listen on 127.0.0.1:%d: %v\n", n, err)
		return 125
	}
	f, err := l.File()
	l.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "mcp-forge network: %v\n", err)
		return 125
	}
	exe, err := os.Executable()
	if err == nil {
		// One thread for the Go scheduler: the child counts against the
		// sandbox's pids limit like the code's own processes.
		c := exec.Command(exe, "forward-serve", sock)
		c.Args[0] = Binary
		c.Env = []string{"GOMAXPROCS=1"}
		c.ExtraFiles = []*os.File{f}
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		err = c.Start()
		if err == nil {
			_ = c.Process.Release()
		}
	}
	f.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "mcp-forge network: cannot start the forwarder: %v\n", err)
		return 125
	}
	if len(argv) == 0 {
		return 0
	}
	return become(argv)
}

// ServeForward carries each connection l accepts to the unix socket sock
// until l is closed: bytes both ways, each direction's end passed on as a
// half close. A connection waits up to patience for sock to accept.
func ServeForward(l net.Listener, sock string, patience time.Duration) error {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// EMFILE and the like: the code holds every descriptor; wait
			// rather than spin.
			time.Sleep(50 * time.Millisecond)
			continue
		}
		go forwardConn(c, sock, patience)
	}
}

func forwardConn(c net.Conn, sock string, patience time.Duration) {
	defer c.Close()
	deadline := time.Now().Add(patience)
	var u net.Conn
	for {
		var err error
		if u, err = net.Dial("unix", sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer u.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		pipeHalf(u, c)
	}()
	pipeHalf(c, u)
	wg.Wait()
}

// pipeHalf copies from src to dst, then closes dst's write side (or all of
// dst when it has none, and src too on an error, which ends the other way).
func pipeHalf(dst, src net.Conn) {
	_, err := io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil {
		_ = cw.CloseWrite()
		return
	}
	dst.Close()
	src.Close()
}

// forwardServe is the forwarder's child: the listener is its descriptor 3.
func forwardServe(sock string) int {
	l, err := net.FileListener(os.NewFile(3, "forward"))
	if err != nil {
		return 1
	}
	return report(ServeForward(l, sock, ForwardPatience))
}
