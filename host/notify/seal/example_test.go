package seal_test

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/caphost/caphost/host/notify/seal"
	"github.com/caphost/caphost/policy"
)

// A ring in the middle of a rotation: plans are sealed with version 2,
// plans sealed earlier with version 1 still open, and a plan opens only
// for the intent it was sealed for.
func Example() {
	ring, err := seal.New(seal.Config{WriteVersion: 2, Versions: map[int]policy.Secret{
		1: policy.NewSecret(bytes.Repeat([]byte{1}, 32)), // from secret://env/... in a real host
		2: policy.NewSecret(bytes.Repeat([]byte{2}, 32)),
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	sealed, err := ring.Seal(nil, []byte("a plan"), []byte("intent-a"))
	if err != nil {
		fmt.Println(err)
		return
	}
	plain, err := ring.Open(nil, sealed, []byte("intent-a"))
	fmt.Printf("%s %v %d\n", plain, err, len(sealed)-len(plain))
	_, err = ring.Open(nil, sealed, []byte("intent-b"))
	fmt.Println(errors.Is(err, seal.ErrCorrupt))
	fmt.Println(ring)
	// Output:
	// a plan <nil> 35
	// true
	// seal.Ring(aes-256-gcm write v2 versions [1 2])
}
