// Command mcp-forge-plugin-python is the stateless Python backend: a fresh
// sandbox container for every run.
package main

import (
	_ "embed"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/oneshot"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

//go:embed runner.py
var runner []byte

// Info identifies this plugin; its version moves independently of the core.
var Info = plugin.Info{Name: "python", Version: "0.1.0", Description: "stateless Python: a fresh container per run", Config: oneshot.Config{}}

// Spec runs runner.py with the forge Python image.
var Spec = oneshot.Spec{
	Language:     "python",
	DefaultImage: "mcp-forge/python:3.11",
	Runtime: backend.Runtime{
		LanguageName:    "Python",
		LanguageVersion: "3.11.2",
		Packages:        []string{"numpy 1.24.2", "pandas 1.5.3", "matplotlib 3.6.3"},
		Description: "Each call runs in a fresh container: every statement runs and the value of a final expression is the result. " +
			"Image files (png, jpeg, svg, gif) written to the working directory and open matplotlib figures come back as images. Errors give the line of your code.",
	},
	Command:  func(runner string) []string { return []string{"python3", "-u", runner} },
	Runner:   runner,
	RunnerAs: "runner.py",
	Resident: true,
	Warm:     2,
	CodeAs:   "code.py",
	Env:      map[string]string{"MPLBACKEND": "Agg", "PYTHONDONTWRITEBYTECODE": "1"},
}

// New is the plugin factory.
var New = oneshot.New(Spec)

func main() { plugin.ServeBackend(Info, New) }
