// Command mcp-forge-plugin-r is the stateless R backend: a fresh sandbox
// container for every run, through Rscript.
package main

import (
	_ "embed"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/oneshot"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

//go:embed runner.R
var runner []byte

// Info identifies this plugin; its version moves independently of the core.
var Info = plugin.Info{Name: "r", Version: "0.1.0", Description: "stateless R: a fresh container per run (Rscript)", Config: oneshot.Config{}}

// Spec runs runner.R with the forge R image.
var Spec = oneshot.Spec{
	Language:     "r",
	DefaultImage: "mcp-forge/r:4.2",
	Runtime: backend.Runtime{
		LanguageName:    "R",
		LanguageVersion: "4.2.2",
		Packages:        []string{"jsonlite 1.8.4"},
		Description: "Each call runs in a fresh container like Rscript: top-level expressions run in order and the value of the last one is the result " +
			"(JSON for simple vectors and lists). Errors give the R message and the line; plots come back as PNG images.",
	},
	Command:  func(runner string) []string { return []string{"Rscript", "--no-save", "--no-restore", runner} },
	Runner:   runner,
	RunnerAs: "runner.R",
	Resident: true,
	Warm:     2,
	CodeAs:   "code.R",
	Env:      map[string]string{"R_LIBS_USER": "/tmp/Rlib"},
}

// New is the plugin factory.
var New = oneshot.New(Spec)

func main() { plugin.ServeBackend(Info, New) }
