package fsquota

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func TestImageName(t *testing.T) {
	long := "/b/sessions/" + strings.Repeat("x", 300)
	tests := []struct{ path, prefix string }{
		{"/b/sessions/s1.abcd1234", "s1.abcd1234-"},
		{"/b/sessions/a b\nc", "a_b_c-"},
		{"/b/sessions/ünï", "_n_-"},
		{"/b/sessions/-rf *", "-rf__-"},
		{long, strings.Repeat("x", 64) + "-"},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		n := imageName(tt.path)
		if !strings.HasPrefix(n, tt.prefix) || !strings.HasSuffix(n, ".img") {
			t.Errorf("imageName(%q) = %q, want prefix %q and suffix .img", tt.path, n, tt.prefix)
		}
		if unsafeChars.MatchString(strings.TrimSuffix(n, ".img")) {
			t.Errorf("imageName(%q) = %q has unsafe characters", tt.path, n)
		}
		if p, dup := seen[n]; dup {
			t.Errorf("imageName(%q) = imageName(%q) = %q", tt.path, p, n)
		}
		seen[n] = tt.path
	}
	// Paths that sanitise alike still get their own images.
	if imageName("/b/sessions/a b") == imageName("/b/sessions/a_b") {
		t.Error(`"a b" and "a_b" share an image`)
	}
}

// noMechanism is a Quota on a host where nothing enforces quotas, whatever
// this host offers: chosen, not probed, so that no loop device is touched.
func noMechanism(t *testing.T, required bool) *Quota {
	t.Helper()
	q, err := New(t.TempDir(), hclog.NewNullLogger(), Options{Required: required, Server: "t",
		Mechanism: &Mechanism{Kind: KindNone, Notes: []string{"loop: needs root (CAP_SYS_ADMIN) and /dev/loop-control"}}})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// A chosen mechanism is used as it is: nothing is probed, and no state
// directory appears under the base path.
func TestChosenMechanismIsNotProbed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		mech Mechanism
		want string // error substring; "" for none
	}{
		{"none", Mechanism{Kind: KindNone, Detail: "chosen"}, ""},
		{"unknown", Mechanism{Kind: "zfs"}, `quota mechanism "zfs": use loop or none`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			q, err := New(base, nil, Options{Server: "t", Mechanism: &c.mech})
			if c.want != "" {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("New = %v, want an error with %q", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if q.Mechanism().String() != c.mech.String() {
				t.Errorf("Mechanism = %q, want the chosen %q", q.Mechanism(), c.mech)
			}
			if _, err := os.Stat(filepath.Join(base, stateDir)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("New probed: %s exists (stat: %v)", stateDir, err)
			}
		})
	}
}

func TestRequiredRefusesWithoutMechanism(t *testing.T) {
	q := noMechanism(t, true)
	ws := filepath.Join(q.base, "ws")
	err := q.Provision(ws, 16<<20, -1, -1)
	if !errors.Is(err, ErrUnenforced) {
		t.Fatalf("Provision = %v, want ErrUnenforced", err)
	}
	if !strings.Contains(err.Error(), "needs root") {
		t.Errorf("error %q does not say why", err)
	}
	if _, err := os.Stat(ws); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused workspace was created anyway (stat: %v)", err)
	}
}

func TestNotRequiredMakesPlainDirectory(t *testing.T) {
	q := noMechanism(t, false)
	ws := filepath.Join(q.base, "ws")
	if err := q.Provision(ws, 16<<20, -1, -1); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(ws); err != nil || !st.IsDir() {
		t.Fatalf("workspace not created: %v", err)
	}
	if err := q.Release(ws); err != nil {
		t.Fatal(err)
	}
}

func TestProvisionRejectsBadInput(t *testing.T) {
	q := noMechanism(t, false)
	tests := []struct {
		name string
		path string
		size int64
		want string
	}{
		{"relative", "sessions/x", 16 << 20, "must be absolute"},
		{"too small", filepath.Join(q.base, "x"), MinSize - 1, "below the minimum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := q.Provision(tt.path, tt.size, -1, -1)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Provision = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestNewRejectsBadOwner(t *testing.T) {
	for _, o := range []string{"../x", "a/b", "..", strings.Repeat("x", 65)} {
		if _, err := New(t.TempDir(), nil, Options{Server: o, Mechanism: &Mechanism{Kind: KindNone}}); err == nil {
			t.Errorf("owner %q accepted", o)
		}
	}
}

func TestDetectWithoutMkfs(t *testing.T) {
	requireE2E(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: without it the loop check stops before looking for mkfs.ext4")
	}
	t.Setenv("PATH", "")
	old := mkfsFallbacks
	mkfsFallbacks = []string{"/nonexistent/mkfs.ext4"}
	t.Cleanup(func() { mkfsFallbacks = old })
	m := Detect(t.TempDir())
	if m.Enforced() {
		t.Fatalf("Detect = %v without mkfs.ext4, want none", m)
	}
	if !strings.Contains(m.String(), "install e2fsprogs") {
		t.Errorf("Detect = %q, want it to say to install e2fsprogs", m)
	}
}

func TestDetectRootless(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("needs a user without root (this runs as root)")
	}
	m := Detect(t.TempDir())
	if m.Enforced() || !strings.Contains(m.String(), "loop: ") {
		t.Fatalf("Detect = %v as a user, want none with a loop note", m)
	}
}
