package cache

import (
	"context"
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // the observation digest cache-put-v2 compares with redis.sha1hex; integrity of a prefix, not a secret
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"time"

	"github.com/caphost/caphost/runtime/programs"
)

// A refresh token lets a caller outside the process — a service using
// `caphost serve` — take part in the cache-aside protocol: a lookup that
// misses (or finds a stale entry) may be granted the region's refresh
// lease, with a token that records where the lookup observed the entry.
// The caller loads from its source and records with the token; the write is
// then conditional exactly like GetOrLoad's (same generation, entry still
// as observed) and the lease is released. Callers that were not granted the
// lease get the stale value or wait, bounded, for the holder's write.

// ErrInvalidToken: a refresh token that is malformed, forged, or for
// another region or key.
var ErrInvalidToken = errors.New("cache: invalid refresh token")

// Claim is the outcome of LookupOrClaim.
type Claim uint8

// Claim outcomes.
const (
	// NotClaimed: no claim was asked or needed (a fresh hit, a cached
	// absence, an outage, an unreadable entry under fail-fast).
	NotClaimed Claim = iota
	// Granted: the caller holds the refresh lease: load and record with the
	// token before it expires.
	Granted
	// Contended: another caller holds the lease; the lookup is the stale
	// value, or what the bounded wait found.
	Contended
	// ClaimUnavailable: the lease could not be claimed (Redis).
	ClaimUnavailable
)

var claimNames = [...]string{NotClaimed: "NOT_CLAIMED", Granted: "GRANTED", Contended: "CONTENDED", ClaimUnavailable: "UNAVAILABLE"}

func (c Claim) String() string {
	if int(c) < len(claimNames) {
		return claimNames[c]
	}
	return "INVALID"
}

// LookupOrClaim looks key up and, when the entry is missing or stale (or
// unreadable under quarantine-and-reload), claims the region's refresh
// lease: the one caller granted it gets a token to record with
// (RecordClaimed); the others get Contended with the stale value, or wait
// up to wait (at most the region's lease wait) for the holder's write.
// It claims whatever the region's stampede strategy: the caller asked for
// the lease, and the strategy only decides whether GetOrLoad takes one.
func (r *Region) LookupOrClaim(ctx context.Context, key Key, wait time.Duration) (Lookup, Claim, string, error) {
	rg, err := r.current()
	if err != nil {
		return Lookup{}, NotClaimed, "", err
	}
	loc, err := r.c.locate(ctx, rg, key)
	if err != nil {
		rg.m.lookup(&Lookup{}, err)
		return Lookup{}, NotClaimed, "", err
	}
	var lk observed
	if !r.c.fromL1(rg, loc, &lk.Lookup, nil, false) {
		lk, err = r.c.lookupL2(ctx, rg, loc)
	}
	rg.m.lookup(&lk.Lookup, err)
	if err != nil || !needsRefresh(lk.Lookup) {
		return lk.Lookup, NotClaimed, "", err
	}
	var w *refreshWatch // nil: the caller would not wait
	if lk.Kind == Miss && wait > 0 {
		w = r.c.watchRefresh(rg, loc)
		defer w.end()
	}
	owner := r.c.leaseOwner()
	claim, err := r.c.exec.CacheRefreshClaim(ctx, lk.obs.ref.lease, owner, rg.pol.Ops.LeaseTTL, owner[16:])
	switch {
	case err != nil:
		rg.m.lease("unavailable")
		return lk.Lookup, ClaimUnavailable, "", nil
	case claim.Status == programs.RefreshClaimAcquired || claim.Status == programs.RefreshClaimAlreadyOwned:
		w.end()
		rg.m.lease("acquired")
		again, err := r.c.lookupL2(ctx, rg, loc)
		if err == nil && !needsRefresh(again.Lookup) {
			r.c.releaseLease(rg, lk.obs.ref.lease, owner)
			return again.Lookup, NotClaimed, "", nil
		}
		if err == nil {
			lk = again
		}
		expires := r.c.clock().Add(rg.pol.Ops.LeaseTTL)
		return lk.Lookup, Granted, r.c.sealToken(rg, lk.obs, owner, expires), nil
	case claim.Status == programs.RefreshClaimContended:
		rg.m.lease("contended")
		if w != nil {
			if got, ok := r.c.awaitRefresh(ctx, rg, loc, min(wait, rg.pol.Ops.LeaseWait), w); ok {
				return got, NotClaimed, "", nil
			}
		}
		return lk.Lookup, Contended, "", nil
	}
	rg.m.lease("refused")
	return lk.Lookup, ClaimUnavailable, "", nil
}

// needsRefresh reports a lookup the refresh protocol applies to.
func needsRefresh(lk Lookup) bool {
	switch lk.Kind {
	case Miss:
		return true
	case Hit:
		return lk.Freshness == Stale
	case IncompatibleSchema:
		return lk.reloadable()
	}
	return false
}

// RecordClaimed records value (or, with absent, an authoritative absence)
// for key with the token LookupOrClaim granted, and releases the lease.
// The write applies only in the generation and on the entry state the
// lookup observed; an expired token records nothing
// (NotRecordedCondition): a tombstone it should have respected may have
// expired with it.
func (r *Region) RecordClaimed(ctx context.Context, key Key, token string, value []byte, absent bool, meta RecordMeta) (RecordOutcome, error) {
	rg, err := r.current()
	if err != nil {
		return 0, err
	}
	loc, err := r.c.locate(ctx, rg, key)
	if err != nil {
		rg.m.record(0, err)
		return 0, err
	}
	t, err := r.c.openToken(rg, token)
	if err != nil {
		return 0, err
	}
	if t.loc != loc.Digest() {
		return 0, ErrInvalidToken
	}
	ref, err := rg.members(loc, t.gen)
	if err != nil {
		return 0, ErrInvalidToken
	}
	defer r.c.releaseLease(rg, ref.lease, t.owner[:])
	if !r.c.clock().Before(t.expires) {
		rg.m.record(NotRecordedCondition, nil)
		return NotRecordedCondition, nil
	}
	obs := observation{mode: t.mode, length: t.length, digest: &t.digest, ref: ref}
	o, err := r.c.record(ctx, rg, loc, writeReq{value: value, negative: absent, meta: meta, obs: &obs, leased: true})
	rg.m.record(o, err)
	return o, err
}

// token is an opened refresh token.
type token struct {
	loc     [32]byte
	gen     []byte
	mode    obsMode
	length  int64
	digest  [sha1.Size]byte
	owner   [32]byte
	expires time.Time
}

const (
	tokenVersion = 1
	tokenMACLen  = 16
	tokenDomain  = "caphost/cache/refresh-token/v1"
)

// sealToken encodes and authenticates a token for obs and owner.
func (c *Cache) sealToken(r *region, obs observation, owner []byte, expires time.Time) string {
	b := make([]byte, 0, 160)
	b = append(b, tokenVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(expires.UnixMilli()))
	b = append(b, byte(len(r.pol.ID)))
	b = append(b, r.pol.ID...)
	d := obs.ref.loc.Digest()
	b = append(b, d[:]...)
	b = append(b, byte(len(obs.ref.gen)))
	b = append(b, obs.ref.gen...)
	b = append(b, byte(obs.mode))
	b = binary.BigEndian.AppendUint64(b, uint64(obs.length))
	dg := obs.prefixDigest()
	b = append(b, dg[:]...)
	b = append(b, owner...)
	b = append(b, c.tokenMAC(b)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// openToken verifies and decodes a token of region r.
func (c *Cache) openToken(r *region, s string) (token, error) {
	var t token
	if len(s) > 512 {
		return t, ErrInvalidToken
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < tokenMACLen+1 {
		return t, ErrInvalidToken
	}
	body, mac := b[:len(b)-tokenMACLen], b[len(b)-tokenMACLen:]
	if !hmac.Equal(mac, c.tokenMAC(body)) {
		return t, ErrInvalidToken
	}
	rd := tokenReader{b: body}
	if rd.byte() != tokenVersion {
		return t, ErrInvalidToken
	}
	t.expires = time.UnixMilli(int64(rd.u64()))
	if string(rd.next(int(rd.byte()))) != r.pol.ID {
		return t, ErrInvalidToken
	}
	copy(t.loc[:], rd.next(32))
	t.gen = append([]byte(nil), rd.next(int(rd.byte()))...)
	t.mode = obsMode(rd.byte())
	t.length = int64(rd.u64())
	copy(t.digest[:], rd.next(sha1.Size))
	copy(t.owner[:], rd.next(32))
	if rd.bad || len(rd.b) != 0 || t.mode > obsTombstone || len(t.gen) == 0 {
		return t, ErrInvalidToken
	}
	return t, nil
}

// tokenMAC authenticates a token body with the token key: derived from the
// hint secret when one is configured (so any host of the deployment
// accepts it), else random per process (tokens then work only on the host
// that issued them).
func (c *Cache) tokenMAC(body []byte) []byte {
	m := hmac.New(sha256.New, c.tokenKey[:])
	m.Write([]byte(tokenDomain))
	m.Write(body)
	return m.Sum(nil)[:tokenMACLen]
}

type tokenReader struct {
	b   []byte
	bad bool
}

func (r *tokenReader) next(n int) []byte {
	if n > len(r.b) {
		r.bad, r.b = true, nil
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *tokenReader) byte() byte {
	b := r.next(1)
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

func (r *tokenReader) u64() uint64 {
	b := r.next(8)
	if len(b) < 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

// prefixDigest is the SHA-1 of the observed prefix, as cache-put-v2
// compares it with redis.sha1hex.
func (o observation) prefixDigest() [sha1.Size]byte {
	if o.digest != nil {
		return *o.digest
	}
	return sha1.Sum(o.prefix) //nolint:gosec // see the import
}
