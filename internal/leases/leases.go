// Package leases is what the library knows about a Lease client beyond
// package leader's API: whether it would make Lease requests wait in a
// client-side rate limiter, and when the shard group first saw a Lease;
// and how the claimers and the shard group read a Lease's holder and
// duration.
package leases

import (
	"fmt"
	"log/slog"
	"reflect"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/quietpatch/quietpatch/internal/base"
)

// Check returns a *base.ConfigError naming Leases when client has
// client-go's token-bucket rate limiter with QPS > 0 — what
// kubernetes.NewForConfig builds from a rest.Config whose QPS is 0 (5 a
// second) or positive —, and nil otherwise. A Lease request that waits in
// a limiter renews late, and a claim renewed late is lost.
//
// A client that shows no limiter (no RESTClient method, as fakes, or none
// configured) passes, and so does one of another kind, which this cannot
// size: Warn logs a warning about it.
func Check(client coordinationv1client.LeasesGetter) error {
	lim := limiterOf(client)
	if lim == nil || !isTokenBucket(lim) || lim.QPS() <= 0 {
		return nil
	}
	return &base.ConfigError{Field: "Leases", Reason: fmt.Sprintf("has a client-side rate limiter (QPS %g): Lease requests would wait in it, behind each other and behind every other request of the client, and a renewal sent late loses the claim; build it with leader.NewLeaseClient(restConfig), or from a rest.Config with QPS -1",
		lim.QPS())}
}

// limiterWarning is the warning logged once, when a claimer or the shard
// group starts, for a Lease client's limiter of a kind Check cannot size
// (its type is the attribute limiter).
const limiterWarning = "leader: the Lease client has a client-side rate limiter of a kind the library cannot size: Lease requests may wait in it and renew late; build the client with leader.NewLeaseClient(restConfig), or leave rest.Config.RateLimiter nil and set QPS -1"

// Warn logs limiterWarning when client's limiter is of a kind Check
// cannot size. Whoever runs several claimers on one client (the shard
// group) warns once and hands the claimers a client that shows no limiter
// (Checked).
func Warn(log *slog.Logger, client coordinationv1client.LeasesGetter) {
	lim := limiterOf(client)
	if lim == nil || isTokenBucket(lim) || reflect.TypeOf(lim) == reflect.TypeOf(flowcontrol.NewFakeAlwaysRateLimiter()) {
		return
	}
	log.Warn(limiterWarning, "limiter", fmt.Sprintf("%T", lim))
}

// limiterOf returns the rate limiter of client's REST client, if it shows one.
func limiterOf(client coordinationv1client.LeasesGetter) flowcontrol.RateLimiter {
	rc, ok := client.(interface{ RESTClient() rest.Interface })
	if !ok {
		return nil
	}
	r := rc.RESTClient()
	if r == nil || reflect.ValueOf(r).Kind() == reflect.Pointer && reflect.ValueOf(r).IsNil() {
		return nil
	}
	return r.GetRateLimiter()
}

// isTokenBucket reports whether l is client-go's token-bucket limiter, which
// rest.RESTClientFor builds for a positive QPS (its type is unexported).
func isTokenBucket(l flowcontrol.RateLimiter) bool {
	return reflect.TypeOf(l) == reflect.TypeOf(flowcontrol.NewTokenBucketRateLimiter(1, 1))
}

// Checked is a Lease client already checked and warned about by whoever
// runs several claimers on it (the shard group): it shows no limiter. When
// Seen is set, a claimer built on it counts the claim it first reads from
// the moment Seen reports for that Lease and resourceVersion, rather than
// from its own first read (see SeenAt).
type Checked struct {
	coordinationv1client.LeasesGetter
	Seen func(name, resourceVersion string) (time.Time, bool)
}

// SeenAt reports when this process first saw the Lease name at
// resourceVersion, if client is a Checked with Seen: same process, same
// clock, same state — so that taking a dead replica's shard costs one lease
// duration, not two.
func SeenAt(client coordinationv1client.LeasesGetter, name, resourceVersion string) (time.Time, bool) {
	if c, ok := client.(Checked); ok && c.Seen != nil {
		return c.Seen(name, resourceVersion)
	}
	return time.Time{}, false
}

// Holder returns the Lease's spec.holderIdentity; "" when it has none, or
// for a nil Lease.
func Holder(l *coordv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// Duration returns the Lease's leaseDurationSeconds; a missing or
// non-positive value, or a nil Lease, counts as zero (the claim runs out
// when observed).
func Duration(l *coordv1.Lease) time.Duration {
	if l == nil || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= 0 {
		return 0
	}
	return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
}
