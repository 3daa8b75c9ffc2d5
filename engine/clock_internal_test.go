package engine

import (
	"context"
	"testing"
	"time"
)

// dbClock follows the database's clock however far this machine's is
// from it, and a read after clockRefresh takes a new estimate.
func TestDBClock(t *testing.T) {
	offset := 3 * time.Hour
	queried := make(chan struct{}, 8)
	query := func(context.Context) (time.Time, error) {
		queried <- struct{}{}
		return time.Now().Add(offset), nil
	}
	c, err := newDBClock(context.Background(), query)
	if err != nil {
		t.Fatal(err)
	}
	for range clockSamples {
		<-queried
	}
	near := func(want time.Duration) {
		t.Helper()
		if d := c.now().Sub(time.Now().Add(want)); d < -50*time.Millisecond || d > 50*time.Millisecond {
			t.Fatalf("the clock is %v off the database's", d)
		}
	}
	near(offset)
	// The database's clock moved (or this machine's stepped): a read
	// with an estimate older than clockRefresh starts a new one.
	offset = 4 * time.Hour
	c.mu.Lock()
	c.base, c.mono = c.base.Add(-clockRefresh), c.mono.Add(-clockRefresh)
	c.mu.Unlock()
	near(3 * time.Hour) // the old estimate until the new one is in
	<-queried
	for {
		c.mu.Lock()
		done := !c.refreshing
		c.mu.Unlock()
		if done {
			break
		}
		time.Sleep(time.Millisecond)
	}
	near(offset)
}
