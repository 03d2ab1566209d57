// A third-party backend plugin for a made-up language, "shout", built only on
// the SDK: it proves a language can be added without touching the core.
// Running shout code prints it upper-cased and returns its length.
package main

import (
	"github.com/mcp-forge/mcp-forge/sdk/oneshot"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

// runner is the program each run executes in a fresh container. sdk/oneshot
// puts the user's code in $FORGE_IN (as Spec.CodeAs names it) and reads the
// run's value from result.json in $FORGE_META: "json" is the value as JSON,
// "repr" as the user should read it.
const runner = `import json, os
src = open(os.path.join(os.environ["FORGE_IN"], "code.shout")).read()
print(src.upper())
json.dump({"json": str(len(src)), "repr": str(len(src))}, open(os.path.join(os.environ["FORGE_META"], "result.json"), "w"))
`

// Info is who the plugin says it is; the core shows the version and refuses
// one that is not semver. The plugin takes no [plugins.shout.config] key.
var Info = plugin.Info{Name: "shout", Version: "1.2.3", Description: "upper-cases its input"}

// Spec is everything oneshot needs to run a language: the image, how to
// start the runner in it, and where the code goes.
var Spec = oneshot.Spec{
	Language:     "shout",
	DefaultImage: "mcp-forge/python:3.11", // any image with python3: the runner is Python
	Command:      func(r string) []string { return []string{"python3", r} },
	Runner:       []byte(runner),
	RunnerAs:     "runner.py",
	CodeAs:       "code.shout",
}

func main() { plugin.ServeBackend(Info, oneshot.New(Spec)) }
