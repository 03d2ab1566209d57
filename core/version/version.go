// Package version is the core's own version; plugins carry their own.
package version

// Version is set at build time with -ldflags "-X .../core/version.Version=…".
var Version = "0.1.0-dev"
