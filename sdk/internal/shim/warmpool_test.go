package shim

import (
	"reflect"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// Every figure of a warm pool crosses the plugin boundary unchanged.
func TestWarmPoolRoundTrip(t *testing.T) {
	w := &backend.WarmPool{Size: 2, MaxSize: 4, Target: map[string]int{"img|512m": 3}, Grown: 1, Shrunk: 2, MemoryCap: 1 << 30, Warm: 2, Starting: 1,
		InUse: 1, Hits: 9, Misses: 3, Refills: 11, Failures: 1, Retired: 2, LastRefill: 300 * time.Millisecond, MeanRefill: 250 * time.Millisecond, LastFailure: "x"}
	if got := warmPoolFromPB(warmPoolToPB(w)); !reflect.DeepEqual(got, w) {
		t.Fatalf("got %+v\nwant %+v", got, w)
	}
	if warmPoolFromPB(warmPoolToPB(nil)) != nil {
		t.Fatal("no pool became one")
	}
}
