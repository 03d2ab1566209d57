// Package runtime defines what the core needs from a container engine. Only
// its podman subpackage talks to Podman.
package runtime

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/blang/semver/v4"
)

// ErrTimeout is returned by Wait when the container outlived its deadline and
// was killed.
var ErrTimeout = errors.New("timed out")

// Info describes the engine, for doctor and start-up checks.
type Info struct {
	Engine      string // "Podman" or "Kubernetes"; "": Podman
	Socket      string
	Version     string
	APIVersion  string
	OCIRuntime  string
	CgroupsV2   bool
	Rootless    bool
	CgroupsMode string
}

// Container is one of ours as listed by the engine.
type Container struct {
	ID      string
	Name    string
	Image   string
	ImageID string // the image it was created from, by ID (Image may be a name)
	State   string
	Created time.Time
	Labels  map[string]string
}

// Output is a container's captured stdout and stderr, each capped.
type Output struct {
	Stdout, Stderr           []byte
	StdoutTotal, StderrTotal int64 // bytes produced, including what the cap dropped
}

// ExecResult is the outcome of a command run in a running container.
type ExecResult struct {
	ExitCode int
	TimedOut bool // ended by ExecRequest.Timeout
	Output
}

// ExecKillGrace is how long a command past its ExecRequest.Timeout has
// between SIGTERM and SIGKILL.
const ExecKillGrace = 2 * time.Second

// ExecRequest is a command run in a running container.
type ExecRequest struct {
	Command []string
	Stdin   []byte // nil: no stdin
	Env     map[string]string
	WorkDir string
	Max     int64 // cap of each stream kept in the result
	// Stdout and Stderr, if set, also receive the output as it is produced.
	Stdout, Stderr io.Writer
	// Timeout, if > 0, bounds the command: past it the runtime sends SIGTERM
	// to the command's process group, SIGKILL ExecKillGrace later, and the
	// result has TimedOut set. The runtime does it itself: nothing in the
	// image is needed.
	Timeout time.Duration
}

// ImageInfo describes a local image.
type ImageInfo struct {
	ID      string
	Size    int64
	Labels  map[string]string
	Names   []string // repository tags, fully qualified: "localhost/mcp-forge/python:3.11"
	Digests []string // manifest digests ("sha256:…") and repository digests ("name@sha256:…")
	Created time.Time
}

// LayerBuild is an image made of a base image and one layer: the
// directory Context copied onto / of Base, labelled, with no network and no
// command run (a Containerfile of FROM, COPY and nothing else).
type LayerBuild struct {
	Base    string // the base image's ID, so that a retag of its name cannot change what is built on
	Context string // the layer: a directory on this host
	Labels  map[string]string
	// Log receives the engine's build output; nil discards it.
	Log io.Writer
}

// ImageBuilder builds, tags, lists and removes the images the core makes
// for custom environments. Only the Podman runtime implements it.
type ImageBuilder interface {
	// BuildLayer builds b untagged and returns the new image's ID.
	BuildLayer(ctx context.Context, b LayerBuild) (string, error)
	// Tag gives image id the name ref ("mcp-forge/custom:name").
	Tag(ctx context.Context, id, ref string) error
	// Images lists local images carrying every one of labels.
	Images(ctx context.Context, labels map[string]string) ([]ImageInfo, error)
	// RemoveImage removes an image by name or ID (its tag only, if another
	// name still points at it).
	RemoveImage(ctx context.Context, ref string) error
}

// OOMVerdict is what the engine can tell about an OOM kill.
type OOMVerdict int

// OOM verdicts.
const (
	OOMUnknown OOMVerdict = iota // no signal available (remote engine, unreadable kernel log)
	OOMKill                      // the kernel reported an OOM kill in the container's cgroup
	NoOOMKill                    // the kernel log was read and reports none
)

func (v OOMVerdict) String() string {
	switch v {
	case OOMKill:
		return "oom-killed"
	case NoOOMKill:
		return "not oom-killed"
	}
	return "unknown"
}

// Containers is the containers' lifecycle. Specs reaching Create have
// passed the policy; the runtime only translates them.
type Containers interface {
	Create(ctx context.Context, spec Spec) (string, error)
	Start(ctx context.Context, id string) error
	// Wait blocks until the container exits and returns its exit code. Past
	// timeout the container is killed and ErrTimeout returned.
	Wait(ctx context.Context, id string, timeout time.Duration) (int, error)
	// State inspects the container: running, or its exit code.
	State(ctx context.Context, id string) (running bool, exitCode int, err error)
	// OOMKilled says whether the kernel's OOM killer killed a process of an
	// exited container (an exit code of 137 is also what any SIGKILL gives).
	OOMKilled(ctx context.Context, id string) (OOMVerdict, error)
	Logs(ctx context.Context, id string, max int64) (Output, error)
	Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error)
	Signal(ctx context.Context, id, signal string) error
	Stop(ctx context.Context, id string, grace time.Duration) error
	Remove(ctx context.Context, id string) error
	List(ctx context.Context, labels map[string]string) ([]Container, error)
}

// Images looks up the local images containers are created from.
type Images interface {
	Image(ctx context.Context, name string) (ImageInfo, bool, error)
}

// Runtime is a whole container engine as the sandbox manager uses it: what
// it is (Info), what it enforces (Guarantees), its containers and images.
// Image builds are apart (ImageBuilder): not every runtime builds.
type Runtime interface {
	Info(ctx context.Context) (Info, error)
	Guarantor
	Containers
	Images
}

// VersionBelow reports whether an engine version is older than min
// ("4.3.1" < "4.4"); tolerant parsing accepts missing parts and "-dev"
// suffixes, and an unparsable version counts as old.
func VersionBelow(v, min string) bool {
	have, err := semver.ParseTolerant(v)
	if err != nil {
		return true
	}
	want, err := semver.ParseTolerant(min)
	if err != nil {
		return false
	}
	// Pre-release tags ("4.4.0-dev") are builds of that release, not older.
	have.Pre, want.Pre = nil, nil
	return have.LT(want)
}

// HasLabels reports whether have carries every label of want: engines and
// registries filter by labels loosely (or not at all), so a runtime checks
// again what it hands out.
func HasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
