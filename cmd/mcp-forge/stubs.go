package main

import (
	"context"
	"fmt"
	"os"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/doctor"
)

func cmdServe(context.Context, []string) int {
	fmt.Fprintln(os.Stderr, "serve: not built yet")
	return 1
}

func cmdPlugins(context.Context, []string) int { return 1 }

func printMCPJSON() int { return 1 }

func pluginCheck(config.Config) doctor.Check {
	return func(context.Context) []doctor.Result { return nil }
}
