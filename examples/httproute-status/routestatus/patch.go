package routestatus

import (
	"encoding/json"
	"fmt"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// MergePatch returns the JSON merge patch (RFC 7386, content type
// application/merge-patch+json) that sets route's status to desired, for the
// status subresource:
//
//	{"metadata":{"resourceVersion":"<rv>"},"status":{"parents":[...]}}
//
// The resourceVersion makes the patch a compare-and-swap: the API server
// answers 409 Conflict if the route changed since it was read, so the
// read-modify-write cycle the Gateway API requires for status.parents is never
// applied to a newer status. status.parents is listType=atomic, so the whole
// list is sent (an empty list as [], never null: the field is required).
//
// Errors: ErrNilRoute; ErrNoResourceVersion when route has none; or the
// error of Validate(desired), wrapping ErrInvalidStatus — MergePatch never
// builds a patch the CRD would reject.
func MergePatch(route *gatewayv1.HTTPRoute, desired gatewayv1.HTTPRouteStatus) ([]byte, error) {
	if route == nil {
		return nil, ErrNilRoute
	}
	if route.ResourceVersion == "" {
		return nil, fmt.Errorf("%w: %s/%s", ErrNoResourceVersion, route.Namespace, route.Name)
	}
	if err := Validate(desired); err != nil {
		return nil, err
	}
	parents := desired.Parents
	if parents == nil {
		parents = []gatewayv1.RouteParentStatus{}
	}
	p := statusPatch{}
	p.Metadata.ResourceVersion = route.ResourceVersion
	p.Status.Parents = parents
	b, err := json.Marshal(&p)
	if err != nil {
		return nil, fmt.Errorf("routestatus: encoding merge patch for %s/%s: %w", route.Namespace, route.Name, err)
	}
	return b, nil
}

type statusPatch struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Status struct {
		Parents []gatewayv1.RouteParentStatus `json:"parents"`
	} `json:"status"`
}
