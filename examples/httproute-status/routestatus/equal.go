package routestatus

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/statuspatch/conditions"
)

// Equal reports whether a and b are the same status for the purpose of
// deciding whether a patch is needed. It does not allocate.
//
// Parent entries are compared in order: status.parents is a
// listType=atomic list, so a reordered list is a different value to the API
// server, and Compute never reorders entries, so an order difference between
// the current and the desired status never comes from Compute itself.
// Within an entry:
//
//   - controllerName must be equal;
//   - parentRefs must designate the same parent after CRD defaulting (nil
//     group and kind equal gateway.networking.k8s.io and Gateway, nil
//     namespace, sectionName and port equal empty ones), so that a status the
//     server has defaulted is not rewritten forever;
//   - conditions are compared as conditions.Equal compares them: ignoring
//     their order and their lastTransitionTime, each condition (type,
//     status, reason, message and observedGeneration) as often in one list
//     as in the other.
//
// A nil and an empty parents list are equal; a list is equal to itself at
// once (the status UpToDate found up to date, compared with itself).
func Equal(a, b gatewayv1.HTTPRouteStatus) bool {
	if len(a.Parents) != len(b.Parents) {
		return false
	}
	if len(a.Parents) > 0 && &a.Parents[0] == &b.Parents[0] {
		return true
	}
	for i := range a.Parents {
		pa, pb := &a.Parents[i], &b.Parents[i]
		if pa.ControllerName != pb.ControllerName ||
			!parentRefEqual(&pa.ParentRef, &pb.ParentRef) ||
			!conditions.Equal(pa.Conditions, pb.Conditions) {
			return false
		}
	}
	return true
}

func conditionEqual(a, b *metav1.Condition) bool {
	return a.Type == b.Type &&
		a.Status == b.Status &&
		a.Reason == b.Reason &&
		a.ObservedGeneration == b.ObservedGeneration &&
		a.Message == b.Message
}
