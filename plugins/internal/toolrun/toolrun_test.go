package toolrun

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// MaxWrite stops a tool while it writes: one huge file at the limit
// exactly (RLIMIT_FSIZE), many files soon after the total passes it.
func TestMaxWrite(t *testing.T) {
	const limit = 8 << 20
	for _, tc := range []struct {
		name    string
		bin     string
		args    []string
		stopped bool
	}{
		{"one huge file", "/bin/dd", []string{"if=/dev/zero", "of=out", "bs=1M", "count=200"}, true},
		{"many files", "/usr/bin/python3", []string{"-c", "for i in range(200):\n open('f%d' % i, 'wb').write(bytes(1 << 20))"}, true},
		{"under the limit", "/usr/bin/python3", []string{"-c", "open('small', 'wb').write(bytes(1 << 20))"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := os.Stat(tc.bin); err != nil {
				t.Skip(err)
			}
			dir := t.TempDir()
			_, _, err := Run(context.Background(), Cmd{Bin: tc.bin, Args: tc.args, Dir: dir, Timeout: time.Minute, Keep: 1 << 10, MaxWrite: limit})
			var wl *WriteLimitError
			if tc.stopped != errors.Is(err, ErrWriteLimit) || (tc.stopped && !errors.As(err, &wl)) {
				t.Fatalf("err = %v, stopped want %v", err, tc.stopped)
			}
			if !tc.stopped && err != nil {
				t.Fatal(err)
			}
			var total int64
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				fi, err := os.Stat(filepath.Join(dir, e.Name()))
				if err == nil {
					total += fi.Size()
				}
			}
			// Stopped far from the 200 MiB asked for. How near the limit
			// depends on the 5 ms sampling keeping up with the writer: on a
			// loaded 2-core machine a fast writer got 25 MiB past 8 MiB.
			if tc.stopped && total > 100<<20 {
				t.Fatalf("%d bytes written past a limit of %d", total, limit)
			}
			t.Logf("%s: %d bytes on disk, %v", tc.name, total, err)
		})
	}
}
