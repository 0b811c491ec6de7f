package routestatus

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quietpatch/quietpatch/statuspatch/conditions"
)

// mergeConditions returns the conditions of one entry of ours:
// conditions.Merge's — ours replace the previous conditions of their types
// in place (a second one of a type is dropped) or are appended, with the
// previous lastTransitionTime while their status holds, and the others are
// kept in place — less the others the CRD would reject: invalid ones, a
// second one of a type, and those beyond MaxConditions.
func mergeConditions(prev, ours []metav1.Condition, now metav1.Time) []metav1.Condition {
	out := conditions.Merge(prev, ours, nil, now)
	n, others := 0, 0
	for i := range out {
		c := &out[i]
		if !hasType(ours, c.Type) {
			if others >= MaxConditions-len(ours) || hasType(out[:n], c.Type) {
				continue
			}
			if f, _, _ := checkCondition(c); f != "" {
				continue
			}
			others++
		}
		out[n] = *c
		n++
	}
	return out[:n]
}

func hasType(conds []metav1.Condition, t string) bool {
	for i := range conds {
		if conds[i].Type == t {
			return true
		}
	}
	return false
}
