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
var Info = plugin.Info{Name: "jupyter", Version: "0.1.0", Description: "stateful Python sessions: one ipykernel per session", Config: kernel.Config{}}

//go:embed inspect.py
var inspectCode string

//go:embed checkpoint_save.py
var checkpointSave string

//go:embed checkpoint_load.py
var checkpointLoad string

// Spec is ipykernel in the forge Python image.
var Spec = kernel.Spec{
	Language:     "python",
	DefaultImage: "mcp-forge/python:3.11",
	Runtime: backend.Runtime{
		LanguageName:    "Python",
		LanguageVersion: "3.11.2",
		Packages:        []string{"numpy 1.24.2", "pandas 1.5.3", "matplotlib 3.6.3", "ipykernel 6.17.0"},
		Description: "One IPython kernel per session keeps variables and imports across calls; the value of a final expression is the result " +
			"and matplotlib figures come back as images. A timeout interrupts the kernel and keeps its state.",
	},
	Command: kernel.IPyKernelCommand,
	// The inline backend is chosen lazily (on import of pyplot), so a session
	// that never plots does not pay for loading matplotlib at start.
	Env: map[string]string{"HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1", "MPLCONFIGDIR": "/tmp/mpl",
		"MPLBACKEND": "module://matplotlib_inline.backend_inline"},
	InspectCode: inspectCode,
	ResetCode:   "get_ipython().run_line_magic('reset', '-f')\nimport gc as __forge_gc\n__forge_gc.collect()\ndel __forge_gc\n",
	ErrorLine:   errorLine,
	Checkpoint: &backend.Checkpoint{Save: checkpointSave, Load: checkpointLoad, Missing: "No module named 'dill'",
		Hint: "the session's image lacks python3-dill, which checkpoints need: rebuild the images (make setup; images/python/packages.txt lists it)"},
}

var cellLine = regexp.MustCompile(`(?:Cell In ?\[\d+\]|<ipython-input-\d+-[0-9a-f]+>|File <string>), line (\d+)`)

// errorLine is the last line reported in the user's cell.
func errorLine(_, _ string, tb []string) int {
	line := 0
	for _, l := range tb {
		for _, m := range cellLine.FindAllStringSubmatch(l, -1) {
			line, _ = strconv.Atoi(m[1])
		}
	}
	return line
}
