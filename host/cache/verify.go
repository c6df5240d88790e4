package cache

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/runtime/keys/memo"
)

// A codec guest that runs into its deadline on an entry fails the lookup
// closed (a *CodecError of plugins.ClassDeadline), but a wall-clock
// deadline alone says nothing about the bytes: on a loaded host healthy
// entries meet it too, and quarantining then would turn a slow host into
// invalidations of hot entries across the fleet. Left alone, though, bytes
// that make the guest spin stay stored until their TTL and every read
// burns a whole deadline of CPU.
//
// So the lookup hands the entry to the verifier, which decodes it again
// off the hot path with the guest's normal limits and measures the CPU
// time the guest's thread spent (plugins.CodecDecodeMeasured). Only a
// second deadline with at least verifyCPUShare of the module's call
// timeout spent on CPU — the bytes need more than the budget — or a
// failure that quarantines on the lookup path (a trap, a corrupt status)
// quarantines the entry, through the same conditional write as a lookup's
// quarantine. A deadline with less CPU is the host's load: inconclusive,
// the entry untouched.
//
// One verification runs at a time per Cache, not per region: each can
// cost a whole call deadline of one core, so the bound on that cost must
// not grow with the number of regions (nor with a guest's region
// declarations). A request while one runs is dropped and counted — a
// spinning entry is read again, and verified then — and an entry judged
// healthy or inconclusive is not verified again for verifyCooldown, so a
// loaded host does not spend its spare core re-verifying the same hot
// entries.

// verifyCPUShare is the share of the module's call timeout a verification
// must spend on CPU, and still run into its deadline, to quarantine.
const verifyCPUShare = 0.9

// verifyCooldown is how long an entry verified healthy or inconclusive is
// not verified again.
const verifyCooldown = 30 * time.Second

// verifiedBits sizes the table of entries in their cooldown: 1<<8 slots,
// a store replacing one at random when both of an entry's are taken (an
// entry forgotten early is only verified again, one at a time).
const verifiedBits = 8

// verifyWait bounds a verification's wait for a guest instance (its call
// runs under the module's own deadline, at most plugins.HardCaps'), and
// then its quarantine write.
const verifyWait = 30 * time.Second

// Verification verdicts (the verdict label of
// caphost_cache_codec_verifications_total).
const (
	verdictQuarantined  = "quarantined"
	verdictInconclusive = "inconclusive"
	verdictHealthy      = "healthy"
	verdictDropped      = "dropped"
)

// verifier runs the background verifications of one Cache.
type verifier struct {
	slot chan struct{} // one verification in flight
	ctx  context.Context
	stop context.CancelFunc

	// cooldown and cpuShare are verifyCooldown and verifyCPUShare (a test
	// changes them).
	cooldown time.Duration
	cpuShare float64

	mu     sync.Mutex
	closed bool
	// recent: entry → verified at (healthy, inconclusive), keyed by the
	// two halves of its verifyID.
	recent *memo.Table[time.Time]
}

// verifyID identifies a stored entry: its key (which holds the generation)
// and the envelope it holds (length and header prefix, which carries the
// payload's digest; see observedPrefix).
type verifyID [sha256.Size]byte

func newVerifier() *verifier {
	ctx, stop := context.WithCancel(context.Background())
	return &verifier{slot: make(chan struct{}, 1), ctx: ctx, stop: stop, cooldown: verifyCooldown,
		cpuShare: verifyCPUShare, recent: memo.New[time.Time](verifiedBits)}
}

// close cancels a running verification and refuses new ones; a Cache's
// Close then waits for it through c.bg.
func (v *verifier) close() {
	v.mu.Lock()
	v.closed = true
	v.mu.Unlock()
	v.stop()
}

func idOf(obs observation) verifyID {
	h := sha256.New()
	h.Write([]byte(obs.ref.entry.Redis()))
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(obs.length))
	h.Write(n[:])
	h.Write(obs.prefix)
	var id verifyID
	h.Sum(id[:0])
	return id
}

// overran reports whether a decode failure is a codec guest that ran into
// its deadline: the verifier's case.
func overran(err error) bool {
	var ce *CodecError
	return errors.As(err, &ce) && errors.Is(ce.Err, plugins.ClassDeadline)
}

// verify hands the entry obs observed, whose payload (at version) the
// region's codec guest ran into its deadline on, to the verifier. It
// never blocks: when a verification runs, or the entry was verified
// recently, the request is dropped and counted.
func (c *Cache) verify(r *region, obs observation, version uint32, payload []byte) {
	gc, ok := r.codec.(guestCodec)
	if !ok || obs.mode != obsValue {
		return
	}
	v := c.verifier
	select {
	case v.slot <- struct{}{}:
	default:
		r.m.verification(verdictDropped)
		return
	}
	id := idOf(obs)
	v.mu.Lock()
	at, seen := v.recent.Lookup(id.halves())
	if v.closed || (seen && time.Since(at) < v.cooldown) {
		v.mu.Unlock()
		<-v.slot
		r.m.verification(verdictDropped)
		return
	}
	// Added under v.mu, which close takes before Close waits: no Add
	// after the Wait began.
	c.bg.Add(1)
	v.mu.Unlock()
	// Both point into the read's reply buffer: copied, so the verification
	// holds 384 bytes and the payload, not the whole reply.
	obs.prefix, payload = slices.Clone(obs.prefix), slices.Clone(payload)
	go func() {
		defer func() { <-v.slot; c.bg.Done() }()
		verdict := c.verifyEntry(r, gc, obs, version, payload)
		if verdict != verdictQuarantined {
			v.remember(id)
		}
		r.m.verification(verdict)
	}()
}

// remember starts id's cooldown. The cooldown is a rate bound, so it runs
// on the process's clock, not the host's (which judges freshness, and
// which tests move).
func (v *verifier) remember(id verifyID) {
	h1, h2 := id.halves()
	v.recent.Store(h1, h2, time.Now())
}

// halves is id as the two 64-bit hashes a memo.Table is keyed by: id is a
// SHA-256, so 128 matching bits mean the same entry.
func (id verifyID) halves() (uint64, uint64) {
	return binary.BigEndian.Uint64(id[:8]), binary.BigEndian.Uint64(id[8:16])
}

// verifyEntry decodes the payload again, measured, and quarantines the
// entry if the verdict is the bytes' fault.
func (c *Cache) verifyEntry(r *region, gc guestCodec, obs observation, version uint32, payload []byte) string {
	ctx, cancel := context.WithTimeout(c.verifier.ctx, verifyWait)
	defer cancel()
	var cpu plugins.CallCPU
	_, err := gc.decodeMeasured(ctx, version, payload, &cpu)
	reason := judge(err, cpu, c.verifier.cpuShare)
	if reason == "" {
		if err == nil || errors.Is(err, errSchema) {
			return verdictHealthy
		}
		return verdictInconclusive
	}
	if c.verifier.ctx.Err() != nil {
		return verdictInconclusive // closing: no write
	}
	qctx, qcancel := context.WithTimeout(c.verifier.ctx, verifyWait)
	defer qcancel()
	c.quarantine(qctx, r, obs, reason)
	return verdictQuarantined
}

// judge returns the quarantine reason of a verification's decode, or ""
// when the entry is not to blame: a success or a schema mismatch (the
// codec answered), a deadline on which the guest spent less than share
// (verifyCPUShare) of its call timeout on CPU (the host's load), a call
// the platform could not measure, and everything else that says nothing
// about the bytes (a full pool, a closed module, a cancelled
// verification).
func judge(err error, cpu plugins.CallCPU, share float64) string {
	switch {
	case err == nil, errors.Is(err, errSchema):
		return ""
	case errors.Is(err, errPayload):
		return "payload"
	case poisoned(err):
		return "codec-failure"
	case overran(err) && cpu.Measured && cpu.Limit > 0 &&
		cpu.CPU >= time.Duration(float64(cpu.Limit)*share):
		return "codec-cpu"
	}
	return ""
}

// decodeMeasured is decode with the guest call's CPU time written to cpu.
func (c guestCodec) decodeMeasured(ctx context.Context, version uint32, payload []byte, cpu *plugins.CallCPU) ([]byte, error) {
	var resp *abi.CodecDecodeResponse
	err := c.call(ctx, c.module, func(g plugins.Guest) (err error) {
		resp, err = plugins.CodecDecodeMeasured(ctx, g, &abi.CodecDecodeRequest{Schema: c.schema, StoredVersion: version, Payload: payload}, cpu)
		return err
	})
	return c.decoded(resp, err)
}
