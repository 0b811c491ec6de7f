package leader

import (
	"cmp"
	"fmt"
	"log/slog"
	"reflect"

	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// LeaseUserAgent is appended to the user agent of the client
// [NewLeaseClient] builds, so that the API server's metrics and audit log
// tell Lease traffic apart.
const LeaseUserAgent = "quietpatch-leases"

// NewLeaseClient returns the client a [Claimer] (or the shard group) needs: a
// coordination/v1 client built from a copy of cfg with no client-side rate
// limiter (QPS -1, no RateLimiter) and [LeaseUserAgent] appended to its
// user agent. Pass it the rest.Config the rest of the controller uses:
// whatever its QPS, Lease requests then never wait in a limiter, behind
// each other or behind other requests. The API server's Priority and
// Fairness still protects the server; a claim's traffic is a few requests
// every RetryPeriod (see the package documentation, section Shards, for
// the rate with K shards).
func NewLeaseClient(cfg *rest.Config) (coordinationv1client.CoordinationV1Interface, error) {
	if cfg == nil {
		return nil, &outcome.ConfigError{Field: "cfg", Reason: "must not be nil"}
	}
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst, c.RateLimiter = -1, 0, nil
	c.UserAgent = cmp.Or(c.UserAgent, rest.DefaultKubernetesUserAgent()) + " " + LeaseUserAgent
	lc, err := coordinationv1client.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("leader: building the Lease client: %w", err)
	}
	return lc, nil
}

// CheckLeaseClient returns a [*outcome.ConfigError] naming Leases when client has
// client-go's token-bucket rate limiter with QPS > 0 — what
// kubernetes.NewForConfig builds from a rest.Config whose QPS is 0 (5 a
// second) or positive —, and nil otherwise. [NewClaimer], quietpatch.NewSharded and
// quietpatch.New call it. A Lease request that waits in a limiter renews
// late, and a claim renewed late is lost: use [NewLeaseClient].
//
// A client that shows no limiter (no RESTClient method, as fakes, or none
// configured) passes, and so does one of another kind, which this cannot
// size: the Claimer and the Group log a warning about it when they start.
func CheckLeaseClient(client coordinationv1client.LeasesGetter) error {
	lim := limiterOf(client)
	if lim == nil || !isTokenBucket(lim) || lim.QPS() <= 0 {
		return nil
	}
	return &outcome.ConfigError{Field: "Leases", Reason: fmt.Sprintf("has a client-side rate limiter (QPS %g): Lease requests would wait in it, behind each other and behind every other request of the client, and a renewal sent late loses the claim; build it with leader.NewLeaseClient(restConfig), or from a rest.Config with QPS -1",
		lim.QPS())}
}

// limiterWarning is the warning the Claimer and the Group log once, at
// Run, for a Lease client's limiter of a kind CheckLeaseClient cannot size
// (its type is the attribute limiter).
const limiterWarning = "leader: the Lease client has a client-side rate limiter of a kind the library cannot size: Lease requests may wait in it and renew late; build the client with leader.NewLeaseClient(restConfig), or leave rest.Config.RateLimiter nil and set QPS -1"

// WarnUnsizedLimiter logs limiterWarning to log when client's limiter is
// of a kind CheckLeaseClient cannot size. A [Claimer] calls it when its
// Run starts; whoever runs several claimers on one client (the shard
// group) calls it once and hands the claimers a client that shows no
// limiter.
func WarnUnsizedLimiter(log *slog.Logger, client coordinationv1client.LeasesGetter) {
	if lim := unsizedLimiter(client); lim != "" {
		log.Warn(limiterWarning, "limiter", lim)
	}
}

// unsizedLimiter returns the type of client's limiter when it is of a kind
// CheckLeaseClient cannot size, else "".
func unsizedLimiter(client coordinationv1client.LeasesGetter) string {
	lim := limiterOf(client)
	if lim == nil || isTokenBucket(lim) || reflect.TypeOf(lim) == reflect.TypeOf(flowcontrol.NewFakeAlwaysRateLimiter()) {
		return ""
	}
	return fmt.Sprintf("%T", lim)
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
