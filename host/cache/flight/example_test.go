package flight_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/caphost/caphost/host/cache/flight"
)

func Example() {
	ctx := context.Background()
	g, err := flight.New[string, string](flight.Config{MaxKeys: 1, MaxWaiters: 16, LoadTimeout: 2 * time.Second})
	if err != nil {
		panic(err)
	}
	defer g.Close()
	source, err := flight.NewBulkhead(4, 0) // four source loads at once, no queue
	if err != nil {
		panic(err)
	}

	// The loader of a cache miss: the source read runs behind the bulkhead,
	// and its context ends with the load's deadline, not the caller's.
	load := func(ctx context.Context) (string, error) {
		release, err := source.Acquire(ctx)
		if err != nil {
			return "", err
		}
		defer release()
		return `{"id":7}`, nil
	}
	v, shared, err := g.Do(ctx, "item:7", load)
	fmt.Println(v, shared, err)

	// One key in flight at most: while it runs, a second key is refused.
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _, _ = g.Do(ctx, "item:8", func(context.Context) (string, error) {
			close(started)
			<-release
			return `{"id":8}`, nil
		})
	}()
	<-started
	_, _, err = g.Do(ctx, "item:9", load)
	fmt.Println(errors.Is(err, flight.ErrTooManyKeys), errors.Is(err, flight.ErrOverloaded))
	close(release)
	<-done

	s := g.Stats()
	fmt.Println(s.Loads, s.RefusedKeys, s.InFlight)
	// Output:
	// {"id":7} false <nil>
	// true true
	// 2 1 0
}
