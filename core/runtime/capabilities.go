package runtime

import (
	"context"
	"time"
)

// Capabilities is what a runtime can do beyond running containers, as it
// declares them (as Nomad's task drivers declare theirs), so that the core
// asks rather than guesses from the runtime's type. The zero value is a
// runtime on the core's own host, alone: Podman's.
type Capabilities struct {
	// Sessions keeps the sessions where the core's replicas find them, so
	// that one takes over another's; nil: the core has no replicas.
	Sessions SessionStore
	// Reaper removes the sandboxes of replicas that are gone; nil: none
	// (on one host, a core's watchdog removes its own).
	Reaper Reaper
	// Quotas shares what this core holds of the tenants' quotas with its
	// replicas; nil: the core is alone.
	Quotas QuotaSharer
	// Replicas reaches the core's other replicas, to forward them the
	// calls of the sessions they serve; nil: there are none.
	Replicas Replicas
	// NoBuilds says why custom environments cannot be built on this
	// runtime; nil: they can (ImageBuilder).
	NoBuilds error
	// StagedWorkspaces: the core's workspace directories are staging
	// copies the runtime sends into its sandboxes, not what they mount:
	// neither the host's filesystem quota nor a host watchdog bounds the
	// sandboxes, and the runtime's own guarantees say what does.
	StagedWorkspaces bool
	// ImagesElsewhere: an image lookup may be answered without asking
	// the runtime (a cluster's nodes pull what they run), so it does not
	// tell whether the runtime answers.
	ImagesElsewhere bool
	// Doctor is the runtime's own checks, for these images, in place of
	// those of a Podman host; nil: the host's.
	Doctor func(images []string) func(context.Context) []Finding
}

// Capable is a runtime that declares its Capabilities.
type Capable interface {
	Capabilities() Capabilities
}

// CapabilitiesOf is what rt declares, or the zero value.
func CapabilitiesOf(rt any) Capabilities {
	if c, ok := rt.(Capable); ok {
		return c.Capabilities()
	}
	return Capabilities{}
}

// Finding is one line of doctor's report of a runtime (core/doctor prints
// them); Status is "ok", "warn" or "FAIL".
type Finding struct {
	Name   string
	Status string
	Detail string
	Fix    string
}

// Reaped is a sandbox removed because the core that made it is gone.
type Reaped struct {
	Container, Session, Image string
	LeftBy                    string // the core that made it (its pod, NAMESPACE/NAME)
	Err                       error
}

// Reaper removes the sandboxes of the core's replicas that are gone.
type Reaper interface {
	// RunReaper sweeps every interval, while this replica is the one that
	// does, until ctx ends; record sees each sandbox removed.
	RunReaper(ctx context.Context, every time.Duration, record func(Reaped))
}

// Usage is what one core holds of one tenant's quotas.
type Usage struct {
	Sessions int
	Runs     int
}

// QuotaSharer shares the tenants' quotas across the core's replicas.
type QuotaSharer interface {
	// ShareQuotas publishes this core's usage (local, read after each
	// Changed and at every renewal) until ctx ends, when it is published a
	// last time; it returns at once.
	ShareQuotas(ctx context.Context, local func() map[string]Usage) SharedQuotas
}

// SharedQuotas is the usage of the tenants' quotas across replicas.
type SharedQuotas interface {
	// Changed says this core's usage changed; it never blocks.
	Changed()
	// Elsewhere is what the other live replicas hold of tenant's quotas;
	// an error while that is not known yet.
	Elsewhere(tenant string) (Usage, error)
	// Known says whether the other replicas' usage is known, and how
	// many other live replicas publish theirs.
	Known() (bool, int)
	// Wait returns once the usage was published a last time.
	Wait()
}

// Replicas are the core's other replicas.
type Replicas interface {
	// Self is this replica ("NAMESPACE/NAME" of its pod).
	Self() string
	// ReplicaAddress is the address of replica (as a HeldError names
	// it); an error if it is not a running replica of this core.
	ReplicaAddress(ctx context.Context, replica string) (string, error)
}
