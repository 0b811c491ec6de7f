package routestatus

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/statuspatch/conditions"
)

// UpToDate reports whether route's status is already the one Compute would
// return for it, as Equal compares them: Equal(route.Status,
// c.Compute(route, lk, now)) for any now (lastTransitionTime is not
// compared). It follows Compute's rules without building the status: for a
// route whose status is up to date it allocates nothing (beyond what lk
// allocates), so a reconcile pass over a converged cluster costs only the
// lookups. Use it before Compute:
//
//	if computer.UpToDate(route, lookup) {
//		return route.Status // nothing to write
//	}
//	desired := computer.Compute(route, lookup, now)
//
// A nil route, or a Computer that owns nothing, is up to date exactly
// when Compute would return an Equal status.
func (c *Computer) UpToDate(route *gatewayv1.HTTPRoute, lk Lookup) bool {
	if route == nil || c == nil || c.opts.ControllerName == "" {
		return route == nil || Equal(route.Status, c.Compute(route, lk, metav1.Now().Time))
	}
	current := route.Status.Parents
	refs := route.Spec.ParentRefs
	if len(current) > MaxParents || len(refs) > MaxParents {
		// Beyond the CRD's limits: not worth a second implementation.
		return Equal(route.Status, c.Compute(route, lk, metav1.Now().Time))
	}
	if lk == nil {
		lk = (*Snapshot)(nil)
	}
	controller := c.opts.ControllerName
	ev := evaluation{c: c, route: route, lk: lk, gen: max(route.Generation, 0)}
	var verdicts [MaxParents]verdict
	for i := range refs {
		verdicts[i] = ev.parent(refs, i)
	}
	var claimed [MaxParents]bool
	// The entries Compute keeps, in order: foreign ones as they are (from
	// is -1), ours with the ref they are for; then the new ones.
	type kept struct {
		entry int // index in current
		ref   int // index in refs; -1: a foreign entry
	}
	var out [MaxParents]kept
	n := 0
	for ei := range current {
		e := &current[ei]
		if e.ControllerName != controller {
			out[n] = kept{entry: ei, ref: -1}
			n++
			continue
		}
		i := -1
		for j := range refs {
			if verdicts[j].handled && !claimed[j] && parentRefEqual(&e.ParentRef, &refs[j]) {
				i = j
				break
			}
		}
		if i < 0 {
			continue // pruned
		}
		claimed[i] = true
		out[n] = kept{entry: ei, ref: i}
		n++
	}
	// Compute appends an entry for every handled ref without one while
	// there is room; the current list cannot have more than MaxParents.
	for i := range refs {
		if n >= MaxParents {
			break
		}
		if verdicts[i].handled && !claimed[i] {
			if n >= len(current) {
				return false // one more entry than now
			}
			out[n] = kept{entry: -1, ref: i}
			n++
		}
	}
	if n != len(current) {
		return false
	}
	for k := range n {
		want, have := out[k], &current[k]
		if want.ref < 0 {
			if want.entry != k && !entryEqual(&current[want.entry], have) {
				return false
			}
			continue
		}
		if have.ControllerName != controller || !parentRefEqual(&refs[want.ref], &have.ParentRef) {
			return false
		}
		var prev []metav1.Condition
		if want.entry >= 0 {
			prev = current[want.entry].Conditions
		}
		if !ev.conditionsUpToDate(prev, &verdicts[want.ref], have.Conditions) {
			return false
		}
	}
	return true
}

// entryEqual compares two entries as Equal does.
func entryEqual(a, b *gatewayv1.RouteParentStatus) bool {
	return a.ControllerName == b.ControllerName && parentRefEqual(&a.ParentRef, &b.ParentRef) &&
		conditions.Equal(a.Conditions, b.Conditions)
}

// conditionsUpToDate reports whether have equals, as conditions.Equal
// compares them, the conditions mergeConditions builds from prev and the
// verdicts (acc for Accepted, the route's ResolvedRefs): the same
// selection, without building it.
func (ev *evaluation) conditionsUpToDate(prev []metav1.Condition, acc *verdict, have []metav1.Condition) bool {
	rr := ev.resolvedRefs()
	ours := [2]*verdict{acc, &rr}
	types := [2]string{string(gatewayv1.RouteConditionAccepted), string(gatewayv1.RouteConditionResolvedRefs)}
	// The conditions mergeConditions writes: prev's kept ones (index into
	// prev) and ours (-1 - k), in its order.
	var sel [MaxConditions]int
	n := 0
	var placed [2]bool
	others := 0
	has := func(t string) bool { // hasType(out so far, t)
		for _, s := range sel[:n] {
			if s < 0 && types[-1-s] == t || s >= 0 && prev[s].Type == t {
				return true
			}
		}
		return false
	}
	for i := range prev {
		p := &prev[i]
		k := -1
		for j := range types {
			if p.Type == types[j] {
				k = j
				break
			}
		}
		if k >= 0 {
			if !placed[k] {
				placed[k] = true
				sel[n] = -1 - k
				n++
			}
			continue
		}
		if others >= MaxConditions-len(types) || has(p.Type) {
			continue
		}
		if f, _, _ := checkCondition(p); f != "" {
			continue
		}
		others++
		sel[n] = i
		n++
	}
	for k := range types {
		if !placed[k] {
			sel[n] = -1 - k
			n++
		}
	}
	if n != len(have) {
		return false
	}
	// The selected conditions have distinct types: have holds each of them
	// once, and nothing else, exactly when each matches one of have and each
	// of have matches one of them.
	matches := func(s int, h *metav1.Condition) bool {
		if s >= 0 {
			return conditionEqual(&prev[s], h)
		}
		v := ours[-1-s]
		return h.Type == types[-1-s] && h.Status == v.status && h.Reason == string(v.reason) &&
			h.ObservedGeneration == ev.gen && v.msg.matches(h.Message)
	}
	for _, s := range sel[:n] {
		found := false
		for i := range have {
			if matches(s, &have[i]) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	for i := range have {
		found := false
		for _, s := range sel[:n] {
			if matches(s, &have[i]) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
