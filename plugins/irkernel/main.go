// Command mcp-forge-plugin-irkernel is the stateful R backend: one IRkernel
// in one container per session.
package main

import (
	_ "embed"
	"regexp"
	"strconv"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/kernel"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

// Info identifies this plugin; its version moves independently of the core.
var Info = plugin.Info{Name: "irkernel", Version: "0.1.0", Description: "stateful R sessions: one IRkernel per session", Config: kernel.Config{}}

//go:embed inspect.R
var inspectCode string

//go:embed checkpoint_save.R
var checkpointSave string

//go:embed checkpoint_load.R
var checkpointLoad string

// Spec is IRkernel in the forge R image. IRkernel ignores interrupt_request
// (SIGINT it instead), sends values as display_data, and its heartbeat is
// silent while R is busy (liveness comes from the container's state).
var Spec = kernel.Spec{
	Language:     "r",
	DefaultImage: "mcp-forge/r:4.2",
	Runtime: backend.Runtime{
		LanguageName:    "R",
		LanguageVersion: "4.2.2",
		Packages:        []string{"jsonlite 1.8.4", "IRkernel 1.3.2"},
		Description: "One R kernel (IRkernel) per session keeps the workspace across calls; the value of the last expression is the result " +
			"and plots come back as PNG images. A timeout interrupts R and keeps its state.",
	},
	Command:           kernel.IRKernelCommand,
	Env:               map[string]string{"HOME": "/tmp", "R_LIBS_USER": "/tmp/Rlib"},
	InterruptBySignal: true,
	ValuesAsDisplay:   true,
	InspectCode:       inspectCode,
	ResetCode:         "rm(list = ls(globalenv(), all.names = TRUE), envir = globalenv()); invisible(gc())",
	ErrorLine:         errorLine,
	Checkpoint:        &backend.Checkpoint{Save: checkpointSave, Load: checkpointLoad},
}

var parseLine = regexp.MustCompile(`<text>:(\d+):\d+`)

// errorLine finds a line for parse errors; IRkernel gives none for runtime errors.
func errorLine(_, evalue string, tb []string) int {
	for _, s := range append([]string{evalue}, tb...) {
		if m := parseLine.FindStringSubmatch(s); m != nil {
			n, _ := strconv.Atoi(m[1])
			return n
		}
	}
	return 0
}

func main() { plugin.ServeBackend(Info, kernel.New(Spec)) }
