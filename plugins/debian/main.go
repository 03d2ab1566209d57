// Command mcp-forge-plugin-debian is the Debian environment builder: it
// resolves python3-* or r-cran-* packages of the base image's Debian release
// with apt on the host (against what the image already has), downloads them
// with apt-get download and unpacks them with dpkg-deb -x into a layer tree,
// never running a maintainer script.
package main

import "github.com/mcp-forge/mcp-forge/sdk/plugin"

func main() { plugin.ServeBuilder(Info, New) }
