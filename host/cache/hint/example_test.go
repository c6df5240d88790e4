package hint_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/caphost/caphost/host/cache/hint"
)

func Example() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	secret := []byte("example-hint-secret-of-32-bytes!") // from secret://env/..., shared by every host
	codec, err := hint.NewCodec(secret, 30*time.Second, clock)
	if err != nil {
		panic(err)
	}
	fmt.Println(codec)

	// Host A invalidated item 7 in generation g and tells the others.
	b, err := codec.Seal(hint.Message{
		Kind: hint.KeyInvalidated, Region: "items", Sender: [16]byte{0xa}, IssuedAt: now,
		Location: sha256.Sum256([]byte("location digest from the key builder")), Scope: []byte("g"),
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(len(b), "bytes, at most", hint.MaxBytes)

	// Host B receives it.
	m, err := codec.Open(b)
	fmt.Println(m.Kind, m.Region, string(m.Scope), err)

	// Anyone else on the channel: a changed byte fails the tag.
	b[31] = 'j' // "items" → "jtems"
	_, err = codec.Open(b)
	fmt.Println(errors.Is(err, hint.ErrForged))

	// A recorded hint replayed later than the window is dropped.
	b[31] = 'i'
	now = now.Add(time.Minute)
	_, err = codec.Open(b)
	fmt.Println(errors.Is(err, hint.ErrStale))
	// Output:
	// hint.Codec(v1 hmac-sha256 window=30s key=***)
	// 102 bytes, at most 288
	// KEY_INVALIDATED items g <nil>
	// true
	// true
}
