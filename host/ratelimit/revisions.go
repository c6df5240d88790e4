package ratelimit

import (
	"errors"
	"fmt"
	"sync"

	"github.com/caphost/caphost/policy"
)

// MaxRememberedRevisions bounds the (policy id, revision) pairs a Limiter
// remembers (see revisionMemory): about 200 bytes each, so at most a few
// MiB. A set that would add pairs beyond it is refused with
// ErrRevisionMemoryFull; restarting the process empties the memory.
const MaxRememberedRevisions = 16384

// ErrRevisionMemoryFull rejects a swap that would make the limiter remember
// more than MaxRememberedRevisions (policy id, revision) pairs.
var ErrRevisionMemoryFull = errors.New("ratelimit: too many policy revisions served by this process")

// revisionMemory remembers the digest of every (policy id, revision) the
// limiter has served, for as long as the limiter lives (the process, for
// the daemon). Rate state is keyed by id and revision (policy.KeyRegion),
// never by digest, and outlives any one policy set: comparing a swap only
// with the set it replaces lets a generation that drops a policy be
// followed by one that brings it back changed under the same revision,
// which would then read the old revision's state with the new parameters
// (a key spent under limit 15 answering remaining 4 of 30). So a pair,
// once served, keeps its digest: a later set may drop the policy, bring it
// back unchanged, or change it under a new revision — never change it under
// the old one.
//
// The memory is per process: after a restart, Redis still holds the old
// revisions' state while the memory is empty, so a changed policy under an
// old revision is then accepted. Operators change a policy by bumping its
// revision (the guest SDK and configuration both make that the one way to
// change parameters).
//
// It is safe for concurrent use (CheckSwap reads it while Swap records).
type revisionMemory struct {
	mu   sync.Mutex
	seen map[string]string // policy.KeyRegion() -> digest
}

// check reports every policy of set served before with another digest,
// and a set that would overflow the memory. It records nothing.
func (r *revisionMemory) check(set *policy.RatePolicySet) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	added := 0
	for _, id := range set.IDs() {
		p, _ := set.Policy(id)
		d, ok := r.seen[p.KeyRegion()]
		switch {
		case !ok:
			added++
		case d != p.Digest:
			errs = append(errs, fmt.Errorf("%w: policy %s revision %s was served with other parameters", ErrRevisionReuse, id, p.Revision))
		}
	}
	if len(r.seen)+added > MaxRememberedRevisions {
		errs = append(errs, fmt.Errorf("%w: %d remembered, %d new, at most %d (restart to forget)",
			ErrRevisionMemoryFull, len(r.seen), added, MaxRememberedRevisions))
	}
	return errors.Join(errs...)
}

// record remembers every policy of set, which is now served (check
// accepted it).
func (r *revisionMemory) record(set *policy.RatePolicySet) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = make(map[string]string, set.Len())
	}
	for _, id := range set.IDs() {
		p, _ := set.Policy(id)
		r.seen[p.KeyRegion()] = p.Digest
	}
}
