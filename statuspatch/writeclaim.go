package statuspatch

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// maxFieldManager is the length the API server allows a field manager.
const maxFieldManager = 128

// WriteClaim is who makes a write: the replica's identity, the Lease it
// holds and the epoch of its claim. The pipeline's dispatcher attaches it
// to the context of every Patcher call; a Patcher reads it with
// [WriteClaimFrom].
type WriteClaim struct {
	// Identity is the holder identity of the claim (leader.Config.Identity).
	Identity string
	// LeaseNamespace and LeaseName name the Lease.
	LeaseNamespace, LeaseName string
	// Epoch is the claim's epoch.
	Epoch int64
}

// WriteClaimFrom returns the WriteClaim ctx carries, if any.
func WriteClaimFrom(ctx context.Context) (WriteClaim, bool) {
	w, ok := ctx.Value(base.WriteClaimKey{}).(WriteClaim)
	return w, ok
}

// FencedFieldManager returns the field manager of a write made by w under
// the fence: <w.LeaseNamespace>/<w.LeaseName>@<w.Identity>. A
// ValidatingAdmissionPolicy whose param is the Lease splits it at the
// first "@" and denies the write when the Lease's spec.holderIdentity is
// not the rest (the HTTPRoute example's deploy/fence). It names the Lease
// whole: a Lease of the same name in another namespace has a binding of
// its own, which must not judge this write. It replaces the patcher's own
// field manager, for which the API server's [maxFieldManager] characters
// leave no room with the longest shard Lease names and identities made of
// pod names. It fails, naming what to shorten, when the result is longer
// than that, and when w names no Lease or identity.
func FencedFieldManager(w WriteClaim) (string, error) {
	if w.LeaseNamespace == "" || w.LeaseName == "" || w.Identity == "" {
		return "", &base.ConfigError{Field: "Observer", Reason: "must tell the Lease and the identity of the writer to fence its writes (leader.Claimer does)"}
	}
	fm := w.LeaseNamespace + "/" + w.LeaseName + "@" + w.Identity
	if len(fm) > maxFieldManager {
		return "", &base.ConfigError{Field: "Lease", Reason: fmt.Sprintf("namespace %q, name %q and identity %q make a fenced field manager of %d characters, more than the API server's %d: shorten Lease.Namespace, Lease.Name or Lease.Identity",
			w.LeaseNamespace, w.LeaseName, w.Identity, len(fm), maxFieldManager)}
	}
	return fm, nil
}

// unfencedWarning is the self-check's warning: the fence does not guard
// a Lease's writes.
const unfencedWarning = "statuspatch: the API server does not fence the writes under this Lease: a dry-run status write naming another writer was not denied; install the fence's ValidatingAdmissionPolicy and a binding whose paramRef selects this Lease (namespace the Lease's, and its name, or the selector quietpatch.io/claim=true for every shard Lease: see examples/httproute-status/deploy/fence)"

// fenceCheck is a fenced patcher's self-check: one dry-run write per Lease
// that names a writer other than the holder, which the fence must deny.
type fenceCheck struct {
	log *slog.Logger

	mu     sync.Mutex
	leases map[string]bool // namespace/name: checked (true) or being checked (false)
	warned bool
}

// check follows a write under w's Lease that ended with werr: a write the
// fence denied shows it works; after a write that succeeded, check makes
// the dry-run write unless it was made, or is being made. One that gets
// no answer is made again after a later write.
func (f *fenceCheck) check(ctx context.Context, d *MergePatcher, p MergePatch, w WriteClaim, werr error) {
	lease := w.LeaseNamespace + "/" + w.LeaseName
	f.mu.Lock()
	_, seen := f.leases[lease]
	switch {
	case outcome.Of(werr) == outcome.Fenced:
		f.leases[lease] = true
		seen = true
	case werr != nil:
		seen = true // not now
	case !seen:
		f.leases[lease] = false
	}
	f.mu.Unlock()
	if seen {
		return
	}
	other := w
	other.Identity = "~" + w.Identity[1:] // same length, never the holder
	if w.Identity[0] == '~' {
		other.Identity = "-" + w.Identity[1:]
	}
	fm, _ := FencedFieldManager(other) // w's fits: so does other's
	_, err := d.send(ctx, p.Namespace, p.Name, []byte("{}"), fm, true)
	o := outcome.Of(err)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !outcome.Answered(err) {
		delete(f.leases, lease) // again after a later write
		return
	}
	f.leases[lease] = true
	if o == outcome.Fenced {
		f.log.Debug("statuspatch: the fence guards the Lease", slog.String("lease", lease))
		return
	}
	if f.warned {
		f.log.Debug("statuspatch: the fence does not guard the Lease either", slog.String("lease", lease), slog.String("outcome", string(o)))
		return
	}
	f.warned = true
	f.log.Warn(unfencedWarning,
		slog.String("lease", lease), slog.String("outcome", string(o)), slog.String("fieldManager", fm), slog.Any("error", err))
}
