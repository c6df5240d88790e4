// Command timeleak is a hostile test guest that declares every v1 kind and
// puts what it reads of the clock and of crypto/rand into every answer
// ("<unix nanoseconds> <16 hex digits of randomness>"): the codec's payload,
// the region's key part, the rate selection's dimension value and the
// rendered body. A host that gives a kind its real clock or entropy shows
// them to such a guest; the tests check that no kind sees either.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

func leak() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return strconv.FormatInt(time.Now().UnixNano(), 10) + " " + hex.EncodeToString(b[:])
}

func init() {
	guest.Register(&guest.Module{
		Name: "timeleak",
		Codecs: []guest.Codec{{
			Decl:   abi.CodecDecl{SchemaID: "leak", WriteVersion: 1, ReadableVersions: []uint32{1}},
			Encode: func([]byte) ([]byte, error) { return []byte(leak()), nil },
			Decode: func(_ uint32, b []byte) ([]byte, error) { return b, nil },
		}},
		Regions: []guest.CacheRegion{{
			Decl:         abi.RegionDecl{ID: "leak", KeyVersion: 1, SoftTTLMs: 1000, HardTTLMs: 2000, MaxBytes: 1024, Codec: "leak"},
			Canonicalize: func([]abi.Attr) ([]string, error) { return []string{leak()}, nil },
		}},
		Rate: &guest.RatePolicies{
			Policies: []abi.RatePolicyDecl{{ID: "leak", Revision: 1, Algorithm: abi.AlgFixedWindow, Limit: 1,
				WindowMs: 1000, MaximumCost: 1, Dimensions: []string{"leak"}}},
			Select: func(*abi.RateSelectRequest) ([]abi.RateSelection, error) {
				return []abi.RateSelection{{PolicyID: "leak", Dimensions: []string{leak()}, Cost: 1}}, nil
			},
		},
		Renderer: &guest.Renderer{
			Templates: []abi.TemplateDecl{{ID: "leak", Version: 1, Locales: []string{"en"}, Channels: []string{"text"}}},
			Render: func(*abi.RenderRequest) ([]abi.MessagePart, error) {
				return []abi.MessagePart{{Name: "body", ContentType: "text/plain", Body: []byte(leak())}}, nil
			},
		},
	})
}

func main() {}
