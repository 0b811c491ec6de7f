package controller

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gatewayv1client "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/typed/apis/v1"

	"github.com/quietpatch/quietpatch/examples/httproute-status/routestatus"
	"github.com/quietpatch/quietpatch/statuspatch"
)

// Type parameters of the library's generic types for HTTPRoutes: objects
// are the informer's *HTTPRoute, statuses HTTPRouteStatus, and patches
// statuspatch.MergePatch (a status merge patch with a resourceVersion
// precondition).
type (
	routeObject = *gatewayv1.HTTPRoute
	routeStatus = gatewayv1.HTTPRouteStatus
	routePatch  = statuspatch.MergePatch
)

// routeComputer is the pipeline's statuspatch.StatusComputer: Compute
// from routestatus for the desired status, the typed (time- and
// order-insensitive, allocation-free) routestatus.Equal for the comparison,
// and a merge patch of status.parents for the change.
type routeComputer struct {
	computer *routestatus.Computer
	lookup   routestatus.Lookup
	now      func() time.Time
}

var _ statuspatch.StatusComputer[routeObject, routeStatus, routePatch] = routeComputer{}

func (c routeComputer) Key(r routeObject) types.NamespacedName {
	return types.NamespacedName{Namespace: r.Namespace, Name: r.Name}
}

func (c routeComputer) Current(r routeObject) routeStatus { return r.Status }

// Desired is the route's status itself when it is up to date (the common
// case of a pass, checked without building a status), else the status
// Compute returns.
func (c routeComputer) Desired(r routeObject) (routeStatus, error) {
	if c.computer.UpToDate(r, c.lookup) {
		return r.Status, nil
	}
	return c.computer.Compute(r, c.lookup, c.now()), nil
}

func (c routeComputer) Equal(current, desired routeStatus) bool {
	return routestatus.Equal(current, desired)
}

// statusBody is the JSON merged into .status: the whole (listType=atomic)
// parents list, never null (the field is required).
type statusBody struct {
	Parents []gatewayv1.RouteParentStatus `json:"parents"`
}

// Patch builds the merge patch; it refuses a status the CRD would reject
// (routestatus.Validate), so such a route counts as a reconcile error and
// nothing is sent.
func (c routeComputer) Patch(r routeObject, desired routeStatus) (routePatch, error) {
	if err := routestatus.Validate(desired); err != nil {
		return routePatch{}, err
	}
	parents := desired.Parents
	if parents == nil {
		parents = []gatewayv1.RouteParentStatus{}
	}
	return statuspatch.NewMergePatch(r, statusBody{Parents: parents})
}

// statusPatcher applies merge patches to the status subresource of
// HTTPRoutes through the typed Gateway API client:
//
//	PATCH /apis/gateway.networking.k8s.io/v1/namespaces/<ns>/httproutes/<name>/status
//	Content-Type: application/merge-patch+json
//	?fieldManager=<FieldManager>
//	{"metadata":{"resourceVersion":"<rv>"},"status":{"parents":[...]}}
//
// It is statuspatch.MergePatcher's twin over the typed client the
// controller's tests give (whose fake the informers share), with one
// difference: the typed client cannot send the call's deadline to the API
// server (the timeout parameter). With fence set it names the writer in
// the field manager as the fenced MergePatcher does.
type statusPatcher struct {
	client       gatewayv1client.HTTPRoutesGetter
	fieldManager string
	fence        bool
}

var _ statuspatch.Patcher[routePatch] = statusPatcher{}

func (p statusPatcher) Patch(ctx context.Context, mp routePatch) error {
	body, err := mp.Body()
	if err != nil {
		return err
	}
	fm := p.fieldManager
	if p.fence {
		w, _ := statuspatch.WriteClaimFrom(ctx)
		if fm, err = statuspatch.FencedFieldManager(w); err != nil {
			return fmt.Errorf("%w: %w", statuspatch.ErrInvalidPatch, err)
		}
	}
	_, err = p.client.HTTPRoutes(mp.Namespace).Patch(ctx, mp.Name, types.MergePatchType, body,
		metav1.PatchOptions{FieldManager: fm}, "status")
	if err != nil {
		return fmt.Errorf("patch status of HTTPRoute %s/%s: %w", mp.Namespace, mp.Name, err)
	}
	return nil
}

// Fenced reports whether p names the writer in the field manager, as
// statuspatch.MergePatcher.Fenced does: quietpatch.New then rejects a
// Lease and identity too long for it.
func (p statusPatcher) Fenced() bool { return p.fence }

// newPatcher returns the pipeline's patcher. Built from the REST
// configuration, it is statuspatch's own, which tells the API server each
// call's deadline and leaves a 429's Retry-After to the dispatcher
// (client-go would sleep it out in one worker while the others go on);
// with a Gateway API client given in Options (tests), it is statusPatcher
// over that client. With Options.Fence, either names the writer.
func newPatcher(opts Options, gw gatewayclient.Interface) (statuspatch.Patcher[routePatch], error) {
	if opts.GatewayClient != nil {
		return statusPatcher{client: gw.GatewayV1(), fieldManager: opts.FieldManager, fence: opts.Fence}, nil
	}
	cfg, err := restConfig(opts)
	if err != nil {
		return nil, err
	}
	p, err := statuspatch.NewMergePatcher(cfg, gatewayv1.SchemeGroupVersion.WithResource("httproutes"), opts.FieldManager)
	if err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	if opts.Fence {
		p = p.WithFence(opts.Logger)
	}
	return p, nil
}
