package runtime

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

// Stream consumer-group facade. Streams give at-least-once delivery through
// a consumer group's pending entries list (PEL), never exactly-once: an
// entry read by a consumer stays pending until XACK, and a consumer that
// dies leaves it for XAUTOCLAIM. Appending to a stream and acknowledging
// together with a state change are catalog programs (notify-*-v1); this
// file holds only the commands that cannot run inside a program: the
// blocking read, the reclaim scan and the group's bookkeeping.
//
// Replies are decoded strictly from go-redis's raw values (RESP2 or RESP3
// shapes): entry fields keep their order and duplicates, so the caller's
// decoder can refuse them.

// Stream bounds.
const (
	// MaxStreamCount bounds the COUNT of a read, reclaim or pending scan.
	MaxStreamCount = 64
	// MaxStreamNameBytes bounds a group or consumer name.
	MaxStreamNameBytes = 64
	// MaxStreamFields bounds the fields of one entry (name/value pairs).
	MaxStreamFields = 16
	// maxStreamIDBytes bounds an entry id ("<ms>-<seq>", two uint64).
	maxStreamIDBytes = 41
)

var (
	// ErrStreamAbsent is matched by StreamCreateGroup when the stream does
	// not exist yet (the group is created without MKSTREAM: streams are
	// created only by a catalog program). Nothing changed.
	ErrStreamAbsent = errors.New("stream does not exist")
	// ErrNoGroup is matched when the stream or its consumer group does not
	// exist (NOGROUP). Nothing changed.
	ErrNoGroup = errors.New("stream consumer group does not exist")
	// ErrStreamReply is matched when a reply does not have the documented
	// shape; the command may have applied (certainty INDETERMINATE for a
	// write).
	ErrStreamReply = errors.New("malformed stream reply")
)

// StreamField is one name/value pair of an entry, in the stored order.
type StreamField struct {
	Name, Value []byte
}

// StreamEntry is one stream entry as stored. Fields is nil for an entry
// that is pending but was deleted from the stream (trimmed).
type StreamEntry struct {
	ID     string
	Fields []StreamField
}

// PendingEntry is one entry of a consumer group's PEL.
type PendingEntry struct {
	ID         string
	Consumer   string
	Idle       time.Duration
	Deliveries int64
}

// StreamGroupInfo is what XINFO GROUPS reports for one group.
type StreamGroupInfo struct {
	// Pending is the number of entries delivered and not acknowledged.
	Pending int64
	// Lag is the number of entries not yet delivered to the group; LagKnown
	// is false when Redis cannot tell (after a deletion or trim in the
	// range it would count).
	Lag      int64
	LagKnown bool
}

// StreamCreateGroup creates group on stream, starting at the stream's first
// entry (id 0) so entries appended before the group existed are delivered.
// created is false when the group already exists (BUSYGROUP); an absent
// stream is ErrStreamAbsent. Regular lane.
func (d *Deployment) StreamCreateGroup(ctx context.Context, stream keys.Key, group string) (created bool, err error) {
	if err := checkStreamArgs(stream, group, "group"); err != nil {
		return false, err
	}
	err = d.regular.client.Do(ctx, "xgroup", "create", stream.Redis(), group, "0").Err()
	switch {
	case err == nil:
		return true, nil
	case isRedisErr(err, "BUSYGROUP"):
		return false, nil
	case isRedisErrContains(err, "requires the key to exist"):
		return false, certainty.Wrap("xgroup-create", notAppliedError{ErrStreamAbsent}, false)
	}
	return false, certainty.Wrap("xgroup-create", err, true)
}

// StreamReadGroup reads at most count new entries (">") of stream for
// consumer in group on the blocking lane, waiting up to block when there
// are none (block 0 does not wait; block must leave a margin below the
// lane's read timeout). No entries is (nil, nil). Entries read are pending
// for consumer until acknowledged: a timeout after send is INDETERMINATE
// (entries may have moved into the PEL; XAUTOCLAIM recovers them).
func (d *Deployment) StreamReadGroup(ctx context.Context, stream keys.Key, group, consumer string, count int, block time.Duration) ([]StreamEntry, error) {
	if err := checkStreamArgs(stream, group, consumer); err != nil {
		return nil, err
	}
	if err := checkCount(count); err != nil {
		return nil, err
	}
	ln, ok := d.lanes[policy.LaneBlocking]
	if !ok {
		return nil, certainty.Wrap("xreadgroup", rejectedError("the deployment has no blocking lane"), false)
	}
	if block < 0 || (block > 0 && block < time.Millisecond) || block > maxBlock(ln.client) {
		return nil, certainty.Wrap("xreadgroup", rejectedError("block must be 0 or 1ms up to half the blocking lane's read timeout"), false)
	}
	// BLOCK 0 would wait forever: a read that must not wait sends no BLOCK.
	args := []any{"xreadgroup", "group", group, consumer, "count", count, "streams", stream.Redis(), ">"}
	if block > 0 {
		args = []any{"xreadgroup", "group", group, consumer, "count", count, "block", block.Milliseconds(), "streams", stream.Redis(), ">"}
	}
	v, err := ln.client.Do(ctx, args...).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		if isRedisErr(err, "NOGROUP") {
			return nil, certainty.Wrap("xreadgroup", notAppliedError{ErrNoGroup}, false)
		}
		return nil, certainty.Wrap("xreadgroup", err, true)
	}
	entries, err := decodeReadGroupReply(v, stream.Redis(), count)
	if err != nil {
		return nil, certainty.Wrap("xreadgroup", indeterminateError{err}, true)
	}
	return entries, nil
}

// StreamAutoClaim transfers to consumer at most count entries of group
// pending for at least minIdle, scanning from start ("0-0" first); next is
// the cursor of the following scan ("0-0" when the scan is complete).
// deleted lists pending entries that no longer exist in the stream
// (trimmed): Redis removed them from the PEL. Regular lane.
func (d *Deployment) StreamAutoClaim(ctx context.Context, stream keys.Key, group, consumer string, minIdle time.Duration, start string, count int) (entries []StreamEntry, next string, deleted []string, err error) {
	if err := checkStreamArgs(stream, group, consumer); err != nil {
		return nil, "", nil, err
	}
	if err := checkCount(count); err != nil {
		return nil, "", nil, err
	}
	if minIdle < time.Millisecond || !validStreamID(start) {
		return nil, "", nil, certainty.Wrap("xautoclaim", rejectedError("minIdle must be at least 1ms and start an entry id"), false)
	}
	v, err := d.regular.client.Do(ctx, "xautoclaim", stream.Redis(), group, consumer, minIdle.Milliseconds(), start, "count", count).Result()
	if err != nil {
		if isRedisErr(err, "NOGROUP") {
			return nil, "", nil, certainty.Wrap("xautoclaim", notAppliedError{ErrNoGroup}, false)
		}
		return nil, "", nil, certainty.Wrap("xautoclaim", err, true)
	}
	entries, next, deleted, err = decodeAutoClaimReply(v, count)
	if err != nil {
		return nil, "", nil, certainty.Wrap("xautoclaim", indeterminateError{err}, true)
	}
	return entries, next, deleted, nil
}

// StreamPendingIdle lists at most count entries of group's PEL that have
// been idle for at least minIdle, oldest first, with their delivery
// counts. Regular lane; reads only.
func (d *Deployment) StreamPendingIdle(ctx context.Context, stream keys.Key, group string, minIdle time.Duration, count int) ([]PendingEntry, error) {
	return d.StreamPendingRange(ctx, stream, group, minIdle, "-", "+", count)
}

// StreamPendingRange is StreamPendingIdle over the PEL entries with ids
// from start to end (both inclusive; an entry id, or "-" and "+" for the
// ends): a reclaim scan reads the delivery counts from the cursor it
// passes to StreamAutoClaim. Redis skips entries idle for less than
// minIdle without counting them against count, so the server walks the
// PEL from start until count entries qualify or end is passed. Regular
// lane; reads only.
func (d *Deployment) StreamPendingRange(ctx context.Context, stream keys.Key, group string, minIdle time.Duration, start, end string, count int) ([]PendingEntry, error) {
	if err := checkStreamArgs(stream, group, "pending"); err != nil {
		return nil, err
	}
	if err := checkCount(count); err != nil {
		return nil, err
	}
	if minIdle < 0 {
		return nil, certainty.Wrap("xpending", rejectedError("minIdle must not be negative"), false)
	}
	if (start != "-" && !validStreamID(start)) || (end != "+" && !validStreamID(end)) {
		return nil, certainty.Wrap("xpending", rejectedError("start and end must be entry ids, \"-\" or \"+\""), false)
	}
	v, err := d.regular.client.Do(ctx, "xpending", stream.Redis(), group, "idle", minIdle.Milliseconds(), start, end, count).Result()
	if err != nil {
		if isRedisErr(err, "NOGROUP") {
			return nil, certainty.Wrap("xpending", notAppliedError{ErrNoGroup}, false)
		}
		return nil, certainty.Wrap("xpending", err, false)
	}
	out, err := decodePendingReply(v, count)
	if err != nil {
		return nil, certainty.Wrap("xpending", rejectedError(err.Error()), false)
	}
	return out, nil
}

// StreamGroupInfo reports group's pending count and lag (XINFO GROUPS).
// A stream without that group is ErrNoGroup. Regular lane; reads only.
func (d *Deployment) StreamGroupInfo(ctx context.Context, stream keys.Key, group string) (StreamGroupInfo, error) {
	if err := checkStreamArgs(stream, group, "info"); err != nil {
		return StreamGroupInfo{}, err
	}
	v, err := d.regular.client.Do(ctx, "xinfo", "groups", stream.Redis()).Result()
	if err != nil {
		if isRedisErrContains(err, "no such key") {
			return StreamGroupInfo{}, certainty.Wrap("xinfo-groups", notAppliedError{ErrNoGroup}, false)
		}
		return StreamGroupInfo{}, certainty.Wrap("xinfo-groups", err, false)
	}
	info, found, err := decodeGroupInfoReply(v, group)
	if err != nil {
		return StreamGroupInfo{}, certainty.Wrap("xinfo-groups", rejectedError(err.Error()), false)
	}
	if !found {
		return StreamGroupInfo{}, certainty.Wrap("xinfo-groups", notAppliedError{ErrNoGroup}, false)
	}
	return info, nil
}

// maxBlock is half the lane's read timeout: a blocking read must come back
// well before the client gives up on the connection.
func maxBlock(c redis.UniversalClient) time.Duration {
	var rt time.Duration
	switch cc := c.(type) {
	case *redis.Client:
		rt = cc.Options().ReadTimeout
	case *redis.ClusterClient:
		rt = cc.Options().ReadTimeout
	case *redis.Ring:
		return 0
	}
	if rt <= 0 {
		return 0
	}
	return rt / 2
}

func checkStreamArgs(stream keys.Key, group, consumer string) error {
	if stream.IsZero() {
		return errZeroKey
	}
	if !validStreamName(group) || !validStreamName(consumer) {
		return certainty.Wrap("stream", rejectedError("group and consumer names must be 1..64 bytes of [A-Za-z0-9._-]"), false)
	}
	return nil
}

func checkCount(count int) error {
	if count < 1 || count > MaxStreamCount {
		return certainty.Wrap("stream", rejectedError("count must be within 1.."+strconv.Itoa(MaxStreamCount)), false)
	}
	return nil
}

func validStreamName(s string) bool {
	if len(s) == 0 || len(s) > MaxStreamNameBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validStreamID accepts exactly "<ms>-<seq>" with canonical decimal parts.
func validStreamID(s string) bool {
	if len(s) < 3 || len(s) > maxStreamIDBytes {
		return false
	}
	ms, seq, ok := strings.Cut(s, "-")
	return ok && canonicalUint(ms) && canonicalUint(seq)
}

func canonicalUint(s string) bool {
	if s == "" || len(s) > 20 || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil
}

func isRedisErr(err error, prefix string) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), prefix)
}

func isRedisErrContains(err error, sub string) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.Contains(rerr.Error(), sub)
}

// notAppliedError is a server answer that changed nothing.
type notAppliedError struct{ err error }

func (e notAppliedError) Error() string                     { return e.err.Error() }
func (e notAppliedError) Unwrap() error                     { return e.err }
func (notAppliedError) CertaintyOutcome() certainty.Outcome { return certainty.NotApplied }

// indeterminateError is a reply that could not be decoded after a write
// may have applied.
type indeterminateError struct{ err error }

func (e indeterminateError) Error() string                     { return e.err.Error() }
func (e indeterminateError) Unwrap() error                     { return e.err }
func (indeterminateError) CertaintyOutcome() certainty.Outcome { return certainty.Indeterminate }

func replyErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrStreamReply, fmt.Sprintf(format, a...))
}

// decodeReadGroupReply decodes XREADGROUP's reply for one stream: RESP3 a
// map {stream: entries}, RESP2 an array [[stream, entries]].
func decodeReadGroupReply(v any, stream string, count int) ([]StreamEntry, error) {
	var entries any
	switch t := v.(type) {
	case map[any]any:
		if len(t) != 1 {
			return nil, replyErr("%d streams, want 1", len(t))
		}
		e, ok := t[stream]
		if !ok {
			return nil, replyErr("reply names another stream")
		}
		entries = e
	case []any:
		if len(t) != 1 {
			return nil, replyErr("%d streams, want 1", len(t))
		}
		pair, ok := t[0].([]any)
		if !ok || len(pair) != 2 {
			return nil, replyErr("stream element is not a pair")
		}
		if name, ok := pair[0].(string); !ok || name != stream {
			return nil, replyErr("reply names another stream")
		}
		entries = pair[1]
	default:
		return nil, replyErr("reply is %T", v)
	}
	return decodeEntries(entries, count, false)
}

// decodeAutoClaimReply decodes [next, entries, deleted].
func decodeAutoClaimReply(v any, count int) ([]StreamEntry, string, []string, error) {
	t, ok := v.([]any)
	if !ok || len(t) != 3 {
		return nil, "", nil, replyErr("xautoclaim reply is not a triple")
	}
	next, ok := t[0].(string)
	if !ok || !validStreamID(next) {
		return nil, "", nil, replyErr("invalid cursor")
	}
	entries, err := decodeEntries(t[1], count, true)
	if err != nil {
		return nil, "", nil, err
	}
	del, ok := t[2].([]any)
	if !ok || len(del) > count {
		return nil, "", nil, replyErr("invalid deleted list")
	}
	deleted := make([]string, 0, len(del))
	for _, d := range del {
		id, ok := d.(string)
		if !ok || !validStreamID(id) {
			return nil, "", nil, replyErr("invalid deleted id")
		}
		deleted = append(deleted, id)
	}
	return entries, next, deleted, nil
}

func decodeEntries(v any, count int, allowNil bool) ([]StreamEntry, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, replyErr("entries are %T", v)
	}
	if len(list) > count {
		return nil, replyErr("%d entries, asked for %d", len(list), count)
	}
	out := make([]StreamEntry, 0, len(list))
	for _, raw := range list {
		pair, ok := raw.([]any)
		if !ok || len(pair) != 2 {
			return nil, replyErr("entry is not a pair")
		}
		id, ok := pair[0].(string)
		if !ok || !validStreamID(id) {
			return nil, replyErr("invalid entry id")
		}
		if pair[1] == nil {
			if !allowNil {
				return nil, replyErr("entry without fields")
			}
			out = append(out, StreamEntry{ID: id})
			continue
		}
		fv, ok := pair[1].([]any)
		if !ok || len(fv)%2 != 0 || len(fv) == 0 || len(fv) > 2*MaxStreamFields {
			return nil, replyErr("entry fields are not 1..%d pairs", MaxStreamFields)
		}
		fields := make([]StreamField, 0, len(fv)/2)
		for i := 0; i < len(fv); i += 2 {
			n, ok1 := fv[i].(string)
			val, ok2 := fv[i+1].(string)
			if !ok1 || !ok2 {
				return nil, replyErr("field is not a string pair")
			}
			fields = append(fields, StreamField{Name: []byte(n), Value: []byte(val)})
		}
		out = append(out, StreamEntry{ID: id, Fields: fields})
	}
	return out, nil
}

// decodePendingReply decodes XPENDING's extended form.
func decodePendingReply(v any, count int) ([]PendingEntry, error) {
	list, ok := v.([]any)
	if !ok || len(list) > count {
		return nil, replyErr("xpending reply is not a list of at most %d", count)
	}
	out := make([]PendingEntry, 0, len(list))
	for _, raw := range list {
		e, ok := raw.([]any)
		if !ok || len(e) != 4 {
			return nil, replyErr("pending entry is not a quadruple")
		}
		id, ok1 := e[0].(string)
		consumer, ok2 := e[1].(string)
		idle, ok3 := e[2].(int64)
		n, ok4 := e[3].(int64)
		if !ok1 || !ok2 || !ok3 || !ok4 || !validStreamID(id) || len(consumer) > 256 || idle < 0 || n < 0 {
			return nil, replyErr("invalid pending entry")
		}
		out = append(out, PendingEntry{ID: id, Consumer: consumer, Idle: time.Duration(idle) * time.Millisecond, Deliveries: n})
	}
	return out, nil
}

// maxGroups bounds the groups XINFO GROUPS may list.
const maxGroups = 64

// decodeGroupInfoReply finds group in XINFO GROUPS (RESP3 maps or RESP2
// flat name/value arrays).
func decodeGroupInfoReply(v any, group string) (StreamGroupInfo, bool, error) {
	list, ok := v.([]any)
	if !ok || len(list) > maxGroups {
		return StreamGroupInfo{}, false, replyErr("xinfo groups reply is not a list of at most %d", maxGroups)
	}
	for _, raw := range list {
		fields := map[string]any{}
		switch t := raw.(type) {
		case map[any]any:
			for k, val := range t {
				ks, ok := k.(string)
				if !ok {
					return StreamGroupInfo{}, false, replyErr("group field name is %T", k)
				}
				fields[ks] = val
			}
		case []any:
			if len(t)%2 != 0 || len(t) > 32 {
				return StreamGroupInfo{}, false, replyErr("group is not name/value pairs")
			}
			for i := 0; i < len(t); i += 2 {
				ks, ok := t[i].(string)
				if !ok {
					return StreamGroupInfo{}, false, replyErr("group field name is %T", t[i])
				}
				if _, dup := fields[ks]; dup {
					return StreamGroupInfo{}, false, replyErr("duplicate group field")
				}
				fields[ks] = t[i+1]
			}
		default:
			return StreamGroupInfo{}, false, replyErr("group is %T", raw)
		}
		name, ok := fields["name"].(string)
		if !ok {
			return StreamGroupInfo{}, false, replyErr("group without a name")
		}
		if name != group {
			continue
		}
		pending, ok := fields["pending"].(int64)
		if !ok || pending < 0 {
			return StreamGroupInfo{}, false, replyErr("group without a pending count")
		}
		info := StreamGroupInfo{Pending: pending}
		switch lag := fields["lag"].(type) {
		case int64:
			if lag < 0 {
				return StreamGroupInfo{}, false, replyErr("negative lag")
			}
			info.Lag, info.LagKnown = lag, true
		case nil:
		default:
			return StreamGroupInfo{}, false, replyErr("lag is %T", lag)
		}
		return info, true, nil
	}
	return StreamGroupInfo{}, false, nil
}
