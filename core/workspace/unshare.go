package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// A file the sandboxed code made private (0600, a sub-id's) is closed to a
// server that is not root, but not to the user's own user namespace, where
// the user is root over its sub-ids (`podman unshare`, 30 ms measured). For
// reads (download_file, export_file, a checkpoint's or fork's copy) the
// server runs its own binary there, which opens the file beneath the
// working directory with the same openat2 guards and hands back the open
// descriptor, read-only, over a socket: the server never gains more than
// reading that one regular file. Writes into what the code closed stay
// refused (deniedHint says how to open it).

// OpenHelper is the hidden first argument that makes the mcp-forge binary
// the helper (cmd/mcp-forge): OpenHelper <root> <rel>, the socket on fd 3.
const OpenHelper = "__open-beneath"

// maxDenied bounds the helper runs of one Files value (one tool call, one
// copy): code that makes thousands of files private costs the server a
// bounded number of processes; past it they are refused (a copy names them).
const maxDenied = 64

// helperTimeout bounds one helper run.
const helperTimeout = 30 * time.Second

// openDenied opens rel (clean) beneath root for reading through the helper,
// if the server is not root; else it returns the error it was given.
var openDenied = func(f *Files, rel string, denied error) (int, error) {
	if !f.shared() || f.denied.Add(1) > maxDenied {
		return -1, denied
	}
	fd, err := helperOpen(f.root, rel)
	if err != nil {
		return -1, fmt.Errorf("%w; reading it in the user namespace: %v", denied, err)
	}
	return fd, nil
}

func helperOpen(root, rel string) (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return -1, err
	}
	if filepathBase(exe) != "mcp-forge" {
		return -1, fmt.Errorf("%s is not the mcp-forge binary, which holds the helper", exe)
	}
	podman, err := exec.LookPath("podman")
	if err != nil {
		return -1, fmt.Errorf("podman is not on PATH: %w", err)
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	mine, theirs := os.NewFile(uintptr(pair[0]), "helper"), os.NewFile(uintptr(pair[1]), "helper")
	defer mine.Close()
	ctx, cancel := context.WithTimeout(context.Background(), helperTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, podman, "unshare", "--", exe, OpenHelper, root, rel)
	cmd.ExtraFiles = []*os.File{theirs}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		theirs.Close()
		return -1, err
	}
	theirs.Close()
	// The helper sends one message: "ok" with the descriptor, or its error.
	unix.SetsockoptTimeval(pair[0], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: int64(helperTimeout / time.Second)})
	buf, oob := make([]byte, 512), make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, rerr := unix.Recvmsg(pair[0], buf, oob, unix.MSG_CMSG_CLOEXEC)
	werr := cmd.Wait()
	var fds []int
	if rerr == nil && oobn > 0 {
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) == 1 {
			fds, _ = unix.ParseUnixRights(&msgs[0])
		}
	}
	switch {
	case rerr == nil && string(buf[:n]) == "ok" && len(fds) == 1 && werr == nil:
		return fds[0], nil
	case rerr != nil:
		err = rerr
	case n > 0:
		err = errors.New(string(buf[:n]))
	default:
		err = fmt.Errorf("%v: %s", werr, strings.TrimSpace(stderr.String()))
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	return -1, err
}

func filepathBase(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }

// RunOpenHelper is the helper: it opens the regular file rel beneath root
// as openBeneath does (no link followed, nothing but a regular file) and
// sends the descriptor, read-only, on fd 3. It returns the exit status.
func RunOpenHelper(args []string) int { return runOpenHelper(3, args) }

func runOpenHelper(sock int, args []string) int {
	send := func(msg string, fd int) int {
		var oob []byte
		if fd >= 0 {
			oob = unix.UnixRights(fd)
		}
		if err := unix.Sendmsg(sock, []byte(msg), oob, nil, 0); err != nil {
			fmt.Fprintln(os.Stderr, "mcp-forge open helper:", err)
		}
		if fd >= 0 {
			return 0
		}
		return 1
	}
	if len(args) != 2 {
		return send("usage: "+OpenHelper+" <root> <rel>", -1)
	}
	rel, err := CleanPath(args[1])
	if err != nil || rel != args[1] || rel == "." {
		return send(fmt.Sprintf("path %q is not a clean relative path", args[1]), -1)
	}
	root, err := unix.Open(args[0], unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return send(fmt.Sprintf("open %s: %v", args[0], err), -1)
	}
	fd, err := openBeneath(root, rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return send(pathErr(rel, err).Error(), -1)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return send(fmt.Sprintf("%s is not a regular file", quote(rel)), -1)
	}
	return send("ok", fd)
}

// deniedCount is how many helper runs a Files value has left (see maxDenied).
type deniedCount = atomic.Int64
