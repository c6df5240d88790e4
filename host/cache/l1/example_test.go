package l1_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/caphost/caphost/host/cache/l1"
)

func Example() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	l, err := l1.New[string](l1.Config{MaxEntries: 10_000, MaxBytes: 16 << 20, MaxAge: time.Minute, Clock: clock})
	if err != nil {
		panic(err)
	}
	defer l.Close()

	// The L2 entry's identity: its location digest and the region
	// generation the lookup captured (host/cache's keyed digest; a plain
	// hash here).
	key := l1.Key{Location: sha256.Sum256([]byte("items/item:7")), Generation: [16]byte{0xb1, 0x94, 0x6a, 0xc9}}
	t := l.Ticket() // before the L2 read
	// ... L2 hit, envelope decoded: hard expiry in 10 s ...
	fmt.Println(l.Set(t, key, `{"id":7}`, 8, now.Add(10*time.Second)))
	v, ok := l.Get(key)
	fmt.Println(v, ok)

	now = now.Add(10 * time.Second) // the L2 hard expiry: never served past it
	_, ok = l.Get(key)
	fmt.Println(ok)

	t = l.Ticket()
	l.Flush() // the invalidation subscription dropped
	fmt.Println(l.Set(t, key, `{"id":7}`, 8, now.Add(10*time.Second)))

	_, err = l1.New[string](l1.Config{Strict: true})
	fmt.Println(errors.Is(err, l1.StrictRegion))
	var disabled *l1.Cache[string] // what a strict region runs with
	_, ok = disabled.Get(key)
	fmt.Println(ok, l.Stats().Hits, l.Stats().Expired, l.Stats().Flushes)
	// Output:
	// STORED
	// {"id":7} true
	// false
	// NOT_STORED_RACED
	// true
	// false 1 1 1
}
