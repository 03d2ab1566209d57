// Command mcp-forge is the MCP-Forge server and its operator commands.
package main

import "os"

func main() { os.Exit(run(os.Args[1:])) }
