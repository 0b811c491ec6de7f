// Package gatewayconditions shows package statuspatch/conditions serving
// Gateway API's statuses, on the real types (sigs.k8s.io/gateway-api
// v1.6.3), in its tests: conditions.New for *gatewayv1.Gateway and
// *gatewayv1.GatewayClass, whose status has no observedGeneration (each
// condition carries its own), and a Gateway's status.listeners[]
// computed through Config.Fields with conditions.Merge and
// conditions.Validate. It has no code of its own: the tests live in the
// examples module so that the library's go.mod does without gateway-api.
package gatewayconditions
