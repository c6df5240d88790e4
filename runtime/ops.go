package runtime

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

// Get reads the string value of k on the regular lane. The reply is bounded
// by the deployment's reply budget (the guard measures every reply). ok is
// false when the key is absent. Errors are *certainty.Error.
func (d *Deployment) Get(ctx context.Context, k keys.Key) (value []byte, ok bool, err error) {
	if k.IsZero() {
		return nil, false, errZeroKey
	}
	v, err := d.regular.client.Get(ctx, k.Redis()).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, certainty.Wrap("get", err, false)
	}
	return v, true, nil
}

// SetWithTTL writes value at k with a TTL in one command (SET PX), so no
// key is ever created without an expiry. ttl must be at least 1ms. Errors
// are *certainty.Error; a timeout after sending is INDETERMINATE.
func (d *Deployment) SetWithTTL(ctx context.Context, k keys.Key, value []byte, ttl time.Duration) error {
	if k.IsZero() {
		return errZeroKey
	}
	if ttl < time.Millisecond {
		return certainty.Wrap("set", errBadTTL, true)
	}
	err := d.regular.client.Set(ctx, k.Redis(), value, ttl).Err()
	return certainty.Wrap("set", err, true)
}

// Delete removes k (UNLINK: the memory is reclaimed off the main thread).
// deleted reports whether the key existed.
func (d *Deployment) Delete(ctx context.Context, k keys.Key) (deleted bool, err error) {
	if k.IsZero() {
		return false, errZeroKey
	}
	n, err := d.regular.client.Unlink(ctx, k.Redis()).Result()
	if err != nil {
		return false, certainty.Wrap("unlink", err, true)
	}
	return n > 0, nil
}

var (
	errZeroKey = certainty.Wrap("key", rejectedError("zero keys.Key (not built by a keys.Builder)"), false)
	errBadTTL  = rejectedError("ttl must be at least 1ms")
)

// rejectedError is a caller mistake caught before anything is sent.
type rejectedError string

func (e rejectedError) Error() string                     { return string(e) }
func (rejectedError) CertaintyOutcome() certainty.Outcome { return certainty.Rejected }
