package leader

// LeaseLabel is the label, with the value "true", of every Lease a
// [Claimer] creates or acquires: a ValidatingAdmissionPolicyBinding whose
// paramRef selects it (paramRef.selector.matchLabels) binds a policy to
// every shard Lease of a deployment at once, as the HTTPRoute example's
// fence does. The claimer adds it when it acquires a Lease that lacks it,
// so Leases created before it existed get it at their next acquisition.
const LeaseLabel = "quietpatch.io/claim"
