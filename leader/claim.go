package leader

import (
	"context"
	"time"
)

// Claim is one observation of who holds the lease and until when.
//
// Expiry is on the observer's own clock: for a claim held by another replica
// it is the local time the claim was observed plus the lease duration, never
// the holder's renewTime (clocks of different machines disagree); for our own
// claim it is the local time the acquire or renew request was sent plus the
// lease duration, so it can only be early, never late.
//
// Epoch identifies one acquisition. It changes every time the lease is
// acquired — also when the same holder acquires it again after losing it — so
// work tagged with the epoch it was produced under can be fenced: work from an
// earlier epoch must not be applied. The [Claimer] keeps it in the Lease's
// spec.leaseTransitions, which it increments on every acquisition
// (docs/leader.md says how that differs from client-go's leaderelection).
//
// Claim is a small value: compare claims with [Claim.Equal], not ==, since
// == on time.Time also compares the location and monotonic reading.
//
// The zero Claim has no holder and is never current.
type Claim struct {
	// Holder is the identity of the holder; "" when nobody holds the lease.
	Holder string
	// Expiry is the local time after which the claim is no longer valid.
	Expiry time.Time
	// Epoch increases with every acquisition of the lease.
	Epoch int64
}

// Equal reports whether c and o describe the same claim: same holder, same
// epoch and the same expiry instant.
func (c Claim) Equal(o Claim) bool {
	return c.Holder == o.Holder && c.Epoch == o.Epoch && c.Expiry.Equal(o.Expiry)
}

// IsCurrent reports whether somebody holds the claim at now.
func (c Claim) IsCurrent(now time.Time) bool {
	return c.Holder != "" && now.Before(c.Expiry)
}

// IsCurrentFor reports whether id holds the claim at now.
func (c Claim) IsCurrentFor(id string, now time.Time) bool {
	return id != "" && c.Holder == id && now.Before(c.Expiry)
}

// Remaining returns how long the claim stays valid after now; zero when it is
// not current.
func (c Claim) Remaining(now time.Time) time.Duration {
	if !c.IsCurrent(now) {
		return 0
	}
	return c.Expiry.Sub(now)
}

// Writer is work that writes to the API server under this replica's claim —
// the dispatcher of a quietpatch pipeline applying status patches — and must have its writes
// answered before the Lease is given up. See [Claimer.AddWriter].
type Writer interface {
	// Quiesce is called when this replica gives its claim of epoch up on
	// purpose, while the claim is still reported as current. It must stop
	// starting writes under epoch at once, let the writes in flight run
	// until the API server answers them (they are not cancelled: a
	// cancelled write may still be executed), wait for them until ctx
	// ends at the latest (ctx ends when the claim runs out), and report
	// whether every write it made under epoch ended with an answer from
	// the API server that settles it: success, or a 4xx status other than
	// 408 Request Timeout saying the write was refused and not done
	// (conflict, not found, forbidden, unauthorized, invalid, throttled).
	// It reports false if any write ended without such an answer (a
	// client-side deadline or cancel, a broken or refused connection, a
	// 5xx, a timeout status) or is still in flight when ctx ends.
	Quiesce(ctx context.Context, epoch int64) (answered bool)
}
