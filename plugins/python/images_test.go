package main

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/sdktest"
)

// Many images over max_image (sparse files cost nothing) do not push the
// runner's answer past its limit, which would lose the run's result: past
// 256 entries the runner leaves the images out and the host reads them.
func TestManyLargeImagesKeepTheResult(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not on PATH")
	}
	b := sdktest.Serve(t, Info, New, sdktest.NewLocalHost(t.TempDir()), []byte(`{"warm": 1}`))
	code := "import os\n" +
		"for i in range(12000):\n" +
		"    with open(os.path.join(os.environ['FORGE_OUT'], 'x' * 240 + '%05d.png' % i), 'wb') as f:\n" +
		"        f.truncate(3 << 20)\n" +
		"41 + 1"
	start := time.Now()
	r, err := b.Execute(context.Background(), backend.ExecuteRequest{Code: code, Timeout: time.Minute, MaxOutputBytes: 1000, MaxImageBytes: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if r.ResultRepr != "42" || r.Error != nil {
		t.Errorf("after %s: result %q, error %+v, success %v; want 42 (notices: %d)", time.Since(start).Round(time.Millisecond), r.ResultRepr, r.Error, r.Success, len(r.Notices))
	}
}
