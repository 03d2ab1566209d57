package plugin

import (
	"os"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
)

// A plugin must not outlive the core that started it: a core killed with
// SIGKILL cannot end its plugins, and go-plugin gives a plugin the core's
// own stdin (for `mcp-forge serve`, the MCP client's pipe, which outlives
// the core), so stdin cannot tell. Two watches, either of which ends the
// plugin:
//
//   - a lifeline pipe: the core passes the read end as an extra file and
//     keeps the write end, never writing to it; the kernel closes it when
//     the core dies however it dies, and the plugin's read returns at once;
//   - the parent pid, polled: when the core dies the plugin is re-parented,
//     which also covers a core that passed no lifeline (an older SDK).
//
// PR_SET_PDEATHSIG is not used: it fires when the *thread* that forked
// the plugin exits, which in a Go core is not the process dying.

// ParentFDEnv names the plugin's file descriptor of the lifeline pipe.
const ParentFDEnv = "MCP_FORGE_PARENT_FD"

// parentPoll is how often the parent pid is checked.
const parentPoll = 200 * time.Millisecond

// watchParent calls exit once the process that started this one is gone.
func watchParent(log hclog.Logger, exit func()) {
	ppid := os.Getppid()
	gone := make(chan string, 2)
	if fd, err := strconv.Atoi(os.Getenv(ParentFDEnv)); err == nil && fd > 2 {
		if f := os.NewFile(uintptr(fd), "lifeline"); f != nil {
			go func() {
				var b [1]byte
				for {
					if _, err := f.Read(b[:]); err != nil {
						gone <- "its lifeline pipe closed"
						return
					}
				}
			}()
		}
	}
	go func() {
		for range time.Tick(parentPoll) {
			if os.Getppid() != ppid {
				gone <- "it was re-parented"
				return
			}
		}
	}()
	go func() {
		why := <-gone
		log.Warn("the core that started this plugin is gone; exiting", "parent_pid", ppid, "because", why)
		exit()
	}()
}
