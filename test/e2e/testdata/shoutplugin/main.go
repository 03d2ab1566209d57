// A third-party backend plugin for a made-up language, "shout", built only on
// the SDK: it proves a language can be added without touching the core.
// Running shout code prints it upper-cased and returns its length.
package main

import (
	"github.com/mcp-forge/mcp-forge/sdk/oneshot"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

const runner = `import json, os
src = open(os.path.join(os.environ["FORGE_IN"], "code.shout")).read()
print(src.upper())
json.dump({"json": str(len(src)), "repr": str(len(src))}, open(os.path.join(os.environ["FORGE_META"], "result.json"), "w"))
`

func main() {
	plugin.ServeBackend(plugin.Info{Name: "shout", Version: "1.2.3", Description: "upper-cases its input"}, oneshot.New(oneshot.Spec{
		Language:     "shout",
		DefaultImage: "mcp-forge/python:3.11",
		Command:      func(r string) []string { return []string{"python3", r} },
		Runner:       []byte(runner),
		RunnerAs:     "runner.py",
		CodeAs:       "code.shout",
	}))
}
