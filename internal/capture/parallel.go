package capture

import (
	"context"
	"runtime"
	"sync"
)

// parallel passes every item to a worker on GOMAXPROCS+2 goroutines (two
// more than the cores, so that one waiting on the disk does not idle a
// core). newWorker is called once per goroutine and returns that
// goroutine's function, so each can keep its own buffers. The first error
// cancels the context the others see, stops the feeding, and is returned.
func parallel[T any](ctx context.Context, items []T, newWorker func() func(context.Context, T) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan T)
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	for range runtime.GOMAXPROCS(0) + 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			do := newWorker()
			for item := range work {
				if err := do(ctx, item); err != nil {
					once.Do(func() { firstErr = err; cancel() })
				}
			}
		}()
	}
feed:
	for _, item := range items {
		select {
		case work <- item:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}
