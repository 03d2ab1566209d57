package environments

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// fakeContainers lists containers as Podman would: those of each poll in
// turn, the last one from then on.
type fakeContainers struct {
	mu     sync.Mutex
	polls  [][]runtime.Container
	asked  int
	labels map[string]string // the filter of the last List
}

func (f *fakeContainers) List(_ context.Context, labels map[string]string) ([]runtime.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.labels = labels
	i := min(f.asked, len(f.polls)-1)
	f.asked++
	return f.polls[i], nil
}

// present is whether a container listed now uses image id.
func (f *fakeContainers) present(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.polls[min(f.asked, len(f.polls))-1] {
		if c.ImageID == id {
			return true
		}
	}
	return false
}

// Delete removes an environment's image only once no container of this
// forge uses it: the container of a run that just answered is waited for,
// a session's refuses the delete (environment_in_use, a warning), and so
// does a run still going after deleteWait. Containers of other images do
// not count; a removal that fails is audited at error, not info.
func TestDeleteWaitsForContainers(t *testing.T) {
	defer func(d time.Duration) { deleteWait = d }(deleteWait)
	deleteWait = 300 * time.Millisecond
	run := func(image string) runtime.Container {
		return runtime.Container{ID: "r-" + image, ImageID: image, Labels: map[string]string{runtime.LabelOneShot: "true"}}
	}
	session := func(image string) runtime.Container {
		return runtime.Container{ID: "s-" + image, ImageID: image, Labels: map[string]string{runtime.LabelSession: "main-0123456789abcdef"}}
	}
	for _, c := range []struct {
		name      string
		polls     func(env string) [][]runtime.Container
		removeErr error
		rule      string // "": deleted
		severity  string // of the environment.delete entry, "" none
	}{
		{"no container", func(string) [][]runtime.Container { return [][]runtime.Container{nil} }, nil, "", audit.Info},
		{"a run's container still being removed", func(env string) [][]runtime.Container {
			return [][]runtime.Container{{run(env)}, {run(env)}, nil}
		}, nil, "", audit.Info},
		{"containers of other images", func(string) [][]runtime.Container {
			return [][]runtime.Container{{run("base-id"), session("other")}}
		}, nil, "", audit.Info},
		{"a session in the environment", func(env string) [][]runtime.Container {
			return [][]runtime.Container{{session(env)}}
		}, nil, RuleInUse, ""},
		{"a run that does not end", func(env string) [][]runtime.Container {
			return [][]runtime.Container{{run(env)}}
		}, nil, RuleInUse, ""},
		{"the runtime fails", func(string) [][]runtime.Container { return [][]runtime.Container{nil} },
			errors.New("podman rmi: the disk is gone"), "", audit.Error},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, nil)
			res, err := r.svc.Build(context.Background(), Request{Name: "env", Packages: []string{"rich"}, Client: "alice"})
			if err != nil {
				t.Fatal(err)
			}
			e, _, _ := r.svc.get(context.Background(), "env")
			fc := &fakeContainers{polls: c.polls(e.ID)}
			r.svc.o.Containers = fc
			r.im.removeErr = func(id string) error {
				if fc.present(id) {
					return fmt.Errorf("image used by a container: image is in use by a container")
				}
				return c.removeErr
			}
			err = r.svc.Delete(context.Background(), "alice", "env")
			switch {
			case c.rule != "":
				if refusedBy(t, err) != c.rule {
					t.Fatalf("%v, want refusal %s", err, c.rule)
				}
				if len(r.im.removed) != 0 {
					t.Fatalf("the image was removed: %v", r.im.removed)
				}
				ev := r.rec.events(EventRefused)
				if len(ev) != 1 || ev[0].Severity != audit.Warning || ev[0].Details["rule"] != RuleInUse {
					t.Fatalf("refusal audit: %+v", ev)
				}
			case c.removeErr != nil:
				if !errors.Is(err, c.removeErr) {
					t.Fatalf("%v, want %v", err, c.removeErr)
				}
			case err != nil:
				t.Fatalf("delete: %v", err)
			}
			if fc.labels[runtime.LabelManaged] != "true" || fc.labels[runtime.LabelInstance] != "inst1" {
				t.Errorf("containers listed by %v: only this forge's are asked for", fc.labels)
			}
			del := r.rec.events(EventDelete)
			if c.severity == "" {
				if len(del) != 0 {
					t.Fatalf("delete audited: %+v", del)
				}
				return
			}
			if len(del) != 1 || del[0].Severity != c.severity || del[0].Success != (c.removeErr == nil) {
				t.Fatalf("delete audit: %+v (image %s)", del, res.Image)
			}
			for _, ev := range r.rec.events(audit.SecurityViolation) {
				t.Errorf("security violation audited: %+v", ev)
			}
		})
	}
}
