package environments

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
)

// usage remembers when each environment was last built or run in, in a
// small JSON file, so that auto_cleanup survives restarts. Podman keeps no
// last-use time for images.
type usage struct {
	path string
	mu   sync.Mutex
	last map[string]time.Time
}

func loadUsage(path string) *usage {
	u := &usage{path: path, last: map[string]time.Time{}}
	if data, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(data, &u.last)
	}
	return u
}

func (u *usage) get(image string, created time.Time) time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	if t, ok := u.last[image]; ok && t.After(created) {
		return t
	}
	return created
}

func (u *usage) touch(image string, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	// A minute's precision is plenty for a cleanup counted in days, and
	// spares a file write on every run.
	if t, ok := u.last[image]; ok && now.Sub(t) < time.Minute {
		return
	}
	u.last[image] = now.UTC()
	u.saveLocked()
}

func (u *usage) forget(image string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.last, image)
	u.saveLocked()
}

func (u *usage) saveLocked() {
	data, _ := json.Marshal(u.last)
	tmp := u.path + ".tmp"
	if os.WriteFile(tmp, data, 0o600) == nil {
		_ = os.Rename(tmp, u.path)
	}
}

// Removal is one environment auto_cleanup removed, and why.
type Removal struct {
	Name   string
	Image  string
	Reason string
}

// cleanupPlan picks what auto_cleanup removes: every environment unused
// for maxAge, then the least recently used beyond maxImages.
func cleanupPlan(envs []Environment, now time.Time, maxAge time.Duration, maxImages int) []Removal {
	sort.Slice(envs, func(i, j int) bool { return envs[i].LastUsed.After(envs[j].LastUsed) })
	var out []Removal
	kept := 0
	for _, e := range envs {
		switch {
		case now.Sub(e.LastUsed) > maxAge:
			out = append(out, Removal{Name: e.Name, Image: e.ID, Reason: "unused for more than environment_builder.auto_cleanup.max_age_days"})
		case kept >= maxImages:
			out = append(out, Removal{Name: e.Name, Image: e.ID, Reason: "more than environment_builder.auto_cleanup.max_images environments; least recently used"})
		default:
			kept++
		}
	}
	return out
}

// Cleanup applies auto_cleanup once, and removes untagged images of this
// forge (builds cut off before they were tagged). Every removal is audited.
func (s *Service) Cleanup(ctx context.Context) ([]Removal, error) {
	ac := s.o.Config.AutoCleanup
	if !ac.Enabled {
		return nil, nil
	}
	ims, err := s.o.Images.Images(ctx, map[string]string{LabelInstance: s.o.Instance})
	if err != nil {
		return nil, err
	}
	var envs []Environment
	var plan []Removal
	for _, im := range ims {
		if e, ok := fromImage(s.o.Instance, im); ok {
			e.LastUsed = s.usage.get(e.Image, e.Created)
			envs = append(envs, e)
		} else if len(im.Names) == 0 && s.o.Now().Sub(im.Created) > time.Duration(s.o.Config.MaxBuildTime)*time.Second {
			// Untagged for longer than any build runs: a leftover, not a build in progress.
			plan = append(plan, Removal{Name: im.Labels[LabelName], Image: im.ID, Reason: "untagged image of a build that did not finish"})
		}
	}
	plan = append(plan, cleanupPlan(envs, s.o.Now(), time.Duration(ac.MaxAgeDays)*24*time.Hour, ac.MaxImages)...)
	var done []Removal
	for _, r := range plan {
		unlock, err := s.lockName(ctx, r.Name)
		if err != nil {
			break // stopping
		}
		err = s.o.Images.RemoveImage(ctx, r.Image)
		unlock()
		s.o.Audit.Record(audit.Entry{Event: EventCleanup, Severity: audit.Info, Success: err == nil,
			Details: map[string]any{"env_name": r.Name, "id": r.Image, "reason": r.Reason}, Error: errString(err)})
		if err == nil {
			done = append(done, r)
			if r.Name != "" {
				s.usage.forget(Ref(r.Name))
			}
		}
	}
	if _, err := os.Stat(filepath.Dir(s.usage.path)); err != nil {
		return done, err
	}
	return done, nil
}
