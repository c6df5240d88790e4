package l1

import (
	"fmt"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/keys"
)

// builder renders entry keys as the host does (a fixed example secret).
var builder = func() *keys.Builder {
	b, err := keys.NewBuilder(keys.Config{App: "shop", Env: "prod", Material: policy.KeyMaterial{
		WriteVersion: 1, Versions: map[int]policy.Secret{1: policy.NewSecret([]byte("example-material-32-bytes-long!!"))},
	}})
	if err != nil {
		panic(err)
	}
	return b
}()

// ek is the entry key of the logical parts (the host adds the captured
// region generation as one of them).
func ek(parts ...string) keys.Key {
	ps := make([][]byte, len(parts))
	for i, p := range parts {
		ps[i] = []byte(p)
	}
	k, err := builder.Build(keys.Spec{Capability: keys.CapCache, Region: "items", KeyVersion: 1, Kind: "entry", Parts: ps})
	if err != nil {
		panic(err)
	}
	return k
}

func ekPool(n int) []keys.Key {
	ks := make([]keys.Key, n)
	for i := range ks {
		ks[i] = ek(fmt.Sprint("item:", i))
	}
	return ks
}

// EK and EKPool let the external tests share the helpers.
var EK, EKPool = ek, ekPool
