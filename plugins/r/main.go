// Command mcp-forge-plugin-r is the stateless R backend: a fresh sandbox
// container for every run, through Rscript.
package main

import (
	_ "embed"

	"github.com/mcp-forge/mcp-forge/sdk/oneshot"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

//go:embed runner.R
var runner []byte

// Info identifies this plugin; its version moves independently of the core.
var Info = plugin.Info{Name: "r", Version: "0.1.0", Description: "stateless R: a fresh container per run (Rscript)"}

// Spec runs runner.R with the forge R image.
var Spec = oneshot.Spec{
	Language:     "r",
	DefaultImage: "mcp-forge/r:4.2",
	Command:      func(runner string) []string { return []string{"Rscript", "--no-save", "--no-restore", runner} },
	Runner:       runner,
	RunnerAs:     "runner.R",
	CodeAs:       "code.R",
	Env:          map[string]string{"R_LIBS_USER": "/tmp/Rlib"},
}

// New is the plugin factory.
var New = oneshot.New(Spec)

func main() { plugin.ServeBackend(Info, New) }
