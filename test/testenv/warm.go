package testenv

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// WarmPool is a plugin's warm pool as environment/info shows it.
type WarmPool struct {
	Size        int    `json:"size"`
	MemoryCap   int64  `json:"memory_cap"`
	Warm        int    `json:"warm"`
	Starting    int    `json:"starting"`
	InUse       int    `json:"in_use"`
	Hits        int64  `json:"hits"`
	Misses      int64  `json:"misses"`
	Refills     int64  `json:"refills"`
	Failures    int64  `json:"failures"`
	Retired     int64  `json:"retired"`
	LastRefill  int64  `json:"last_refill_ms"`
	MeanRefill  int64  `json:"mean_refill_ms"`
	LastFailure string `json:"last_failure"`
}

// Pool reads plugin's warm pool from environment/info; nil if it shows none.
func Pool(t testing.TB, cs *mcp.ClientSession, plugin string) *WarmPool {
	t.Helper()
	res, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "mcp://forge/environment/info"})
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Plugins []struct {
			Name     string    `json:"name"`
			WarmPool *WarmPool `json:"warm_pool"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal([]byte(res.Contents[0].Text), &info); err != nil {
		t.Fatal(err)
	}
	for _, p := range info.Plugins {
		if p.Name == plugin {
			return p.WarmPool
		}
	}
	return nil
}

// WaitWarm waits until plugin's pool has at least n ready containers.
func WaitWarm(t testing.TB, cs *mcp.ClientSession, plugin string, n int) *WarmPool {
	t.Helper()
	var p *WarmPool
	WaitFor(t, plugin+"'s warm pool to fill", 2*time.Minute, func() bool {
		p = Pool(t, cs, plugin)
		return p != nil && p.Warm >= n
	})
	return p
}
