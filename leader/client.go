package leader

import (
	"cmp"

	"github.com/quietpatch/quietpatch/internal/base"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
)

// leaseUserAgent is appended to the user agent of the client
// [NewLeaseClient] builds, so that the API server's metrics and audit log
// tell Lease traffic apart.
const leaseUserAgent = "quietpatch-leases"

// NewLeaseClient returns the client a [Claimer] (or the shard group) needs: a
// coordination/v1 client built from a copy of cfg with no client-side rate
// limiter (QPS -1, no RateLimiter) and [leaseUserAgent] appended to its
// user agent. Pass it the rest.Config the rest of the controller uses:
// whatever its QPS, Lease requests then never wait in a limiter, behind
// each other or behind other requests. The API server's Priority and
// Fairness still protects the server; a claim's traffic is a few requests
// every RetryPeriod (see the package documentation, section Shards, for
// the rate with K shards).
func NewLeaseClient(cfg *rest.Config) (coordinationv1client.CoordinationV1Interface, error) {
	if cfg == nil {
		return nil, &base.ConfigError{Field: "cfg", Reason: "must not be nil"}
	}
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst, c.RateLimiter = -1, 0, nil
	c.UserAgent = cmp.Or(c.UserAgent, rest.DefaultKubernetesUserAgent()) + " " + leaseUserAgent
	lc, err := coordinationv1client.NewForConfig(c)
	if err != nil {
		return nil, &base.ConfigError{Field: "cfg", Reason: "cannot build a Lease client: " + err.Error()}
	}
	return lc, nil
}
