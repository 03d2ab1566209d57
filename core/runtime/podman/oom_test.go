package podman

import (
	"os"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// A transcript of this host's kernel log (cgroups v1, runc): one OOM kill
// with its summary, and one whose summary was rate-limited away.
func TestOOMVerdictFromKernelLog(t *testing.T) {
	f, err := os.Open("testdata/kmsg.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	records := readKmsgFile(f)
	const killed = "587bd255df99f8e8afe5d79c706b38926be230cac1d4e97abe167b6656a394e4"
	const other = "e5cdd1de7bb5139a0976b8224a82d6b005a3866c8477dec5bc75836de8da9b58"
	at := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	for _, c := range []struct {
		name     string
		id       string
		finished time.Duration
		want     runtime.OOMVerdict
	}{
		{"killed container, finished right after", killed, at(796.95), runtime.OOMKill},
		{"killed container, any time", killed, 0, runtime.OOMKill},
		{"kill long before the finish (a child killed earlier)", killed, at(900), runtime.NoOOMKill},
		{"finish before the kill", killed, at(790), runtime.NoOOMKill},
		{"another container at the same time", other, at(796.95), runtime.NoOOMKill},
		{"a rate-limited kill in the window", other, at(2000.2), runtime.OOMUnknown},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := oomVerdict(records, c.id, c.finished); got != c.want {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestParseKmsg(t *testing.T) {
	r, ok := parseKmsg("6,932,796927536,-,caller=T1;oom-kill:constraint=CONSTRAINT_MEMCG\n SUBSYSTEM=memory\n")
	if !ok || r.at != 796927536*time.Microsecond || r.text != "oom-kill:constraint=CONSTRAINT_MEMCG" {
		t.Fatalf("%+v %v", r, ok)
	}
	for _, bad := range []string{"", "no header", "6,1;short", "6,1,x,-;bad time"} {
		if _, ok := parseKmsg(bad); ok {
			t.Errorf("parsed %q", bad)
		}
	}
}

// The kernel log is readable here (root): the reader returns records and
// the clock conversion lands near now.
func TestReadKmsg(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("reading /dev/kmsg needs root")
	}
	start := time.Now()
	recs, err := readKmsg("/dev/kmsg")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("read the kernel log in %v (%d OOM records kept)", time.Since(start), len(recs))
	if d := sinceBoot(time.Now()); d <= 0 {
		t.Fatalf("sinceBoot(now) = %v", d)
	}
}
