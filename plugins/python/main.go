// Command mcp-forge-plugin-python is the stateless Python backend: a fresh
// sandbox container for every run.
package main

import (
	_ "embed"

	"github.com/mcp-forge/mcp-forge/sdk/oneshot"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

//go:embed runner.py
var runner []byte

// Info identifies this plugin; its version moves independently of the core.
var Info = plugin.Info{Name: "python", Version: "0.1.0", Description: "stateless Python: a fresh container per run"}

// Spec runs runner.py with the forge Python image.
var Spec = oneshot.Spec{
	Language:     "python",
	DefaultImage: "mcp-forge/python:3.11",
	Command:      func(runner string) []string { return []string{"python3", "-u", runner} },
	Runner:       runner,
	RunnerAs:     "runner.py",
	CodeAs:       "code.py",
	Env:          map[string]string{"MPLBACKEND": "Agg", "PYTHONDONTWRITEBYTECODE": "1"},
}

// New is the plugin factory.
var New = oneshot.New(Spec)

func main() { plugin.ServeBackend(Info, New) }
