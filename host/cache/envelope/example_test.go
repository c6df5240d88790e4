package envelope_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/caphost/caphost/host/cache/envelope"
)

func Example() {
	lim := envelope.Limits{MaxEncodedBytes: 64 << 10, MaxCodecIDBytes: 64, MaxPayloadBytes: 32 << 10, MaxCompressionRatio: 64}
	written := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b, err := envelope.Encode(envelope.Envelope{
		CodecID: "example.item", PayloadVersion: 3,
		HasSourceRevision: true, SourceRevision: 42,
		WrittenAt: written, SoftExpiresAt: written.Add(30 * time.Second), HardExpiresAt: written.Add(5 * time.Minute),
		Payload: []byte(`{"id":7}`),
	}, lim)
	if err != nil {
		panic(err)
	}
	e, err := envelope.Decode(b, lim)
	if err != nil {
		panic(err)
	}
	fmt.Println(len(b), "bytes, version", e.EnvelopeVersion, "revision", e.SourceRevision)
	fmt.Println(e.State(written.Add(10*time.Second)), e.State(written.Add(time.Minute)), e.State(written.Add(time.Hour)))

	b[4] = 9 // a newer writer's envelope: never a miss, never overwritten
	_, err = envelope.Decode(b, lim)
	fmt.Println(errors.Is(err, envelope.ErrSchemaMismatch), errors.Is(err, envelope.FutureVersion))
	// Output:
	// 83 bytes, version 2 revision 42
	// FRESH STALE EXPIRED
	// true true
}
