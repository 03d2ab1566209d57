// Package periodic runs background housekeeping on a fixed interval.
package periodic

import (
	"context"
	"time"
)

// Every calls fn each interval until ctx ends or fn returns false.
func Every(ctx context.Context, interval time.Duration, fn func(context.Context) bool) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if !fn(ctx) {
				return
			}
		}
	}
}
