package examplee2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/quietpatch/quietpatch/examples/httproute-status/fixtures"
)

// Want is the status entry one controller must have written into a route.
type Want struct {
	// Controller is the entry's controllerName.
	Controller gatewayv1.GatewayController
	// Parent, if set, is the parentRef the entry must carry (compared after
	// the server's defaulting of group and kind); nil accepts any parentRef
	// of the route's spec.
	Parent *gatewayv1.ParentReference
	// Accepted and ResolvedRefs are the conditions' reasons; each
	// condition's status must be True exactly when its reason is the
	// positive one ("Accepted", "ResolvedRefs").
	Accepted, ResolvedRefs gatewayv1.RouteConditionReason
}

// WantFor is the Want for a fixtures expectation.
func WantFor(controller gatewayv1.GatewayController, e fixtures.Expectation) Want {
	return Want{Controller: controller, Accepted: e.Accepted, ResolvedRefs: e.ResolvedRefs}
}

// CheckRoute returns nil when route's status has exactly one entry of
// w.Controller, for w.Parent (or any parentRef of the spec), whose Accepted
// and ResolvedRefs conditions have the wanted reasons and statuses and an
// observedGeneration equal to the route's generation; otherwise an error
// naming the route and what differs.
func CheckRoute(route *gatewayv1.HTTPRoute, w Want) error {
	name := route.Namespace + "/" + route.Name
	var mine []*gatewayv1.RouteParentStatus
	for i := range route.Status.Parents {
		if route.Status.Parents[i].ControllerName == w.Controller {
			mine = append(mine, &route.Status.Parents[i])
		}
	}
	if len(mine) != 1 {
		return fmt.Errorf("%s: %d status entries of %s, want 1", name, len(mine), w.Controller)
	}
	e := mine[0]
	if w.Parent != nil {
		if !sameParent(&e.ParentRef, w.Parent) {
			return fmt.Errorf("%s: entry of %s is for parent %s, want %s", name, w.Controller, describeParent(&e.ParentRef), describeParent(w.Parent))
		}
	} else if !slices.ContainsFunc(route.Spec.ParentRefs, func(p gatewayv1.ParentReference) bool { return equality.Semantic.DeepEqual(p, e.ParentRef) }) {
		return fmt.Errorf("%s: entry of %s is for parent %s, which is not (exactly) in spec.parentRefs", name, w.Controller, describeParent(&e.ParentRef))
	}
	for _, c := range []struct {
		typ    gatewayv1.RouteConditionType
		reason gatewayv1.RouteConditionReason
		ok     gatewayv1.RouteConditionReason
	}{
		{gatewayv1.RouteConditionAccepted, w.Accepted, gatewayv1.RouteReasonAccepted},
		{gatewayv1.RouteConditionResolvedRefs, w.ResolvedRefs, gatewayv1.RouteReasonResolvedRefs},
	} {
		got := meta.FindStatusCondition(e.Conditions, string(c.typ))
		if got == nil {
			return fmt.Errorf("%s: entry of %s has no %s condition", name, w.Controller, c.typ)
		}
		status := metav1.ConditionFalse
		if c.reason == c.ok {
			status = metav1.ConditionTrue
		}
		if got.Reason != string(c.reason) || got.Status != status {
			return fmt.Errorf("%s: %s is %s/%s, want %s/%s", name, c.typ, got.Status, got.Reason, status, c.reason)
		}
		if got.ObservedGeneration != route.Generation {
			return fmt.Errorf("%s: %s has observedGeneration %d, want %d", name, c.typ, got.ObservedGeneration, route.Generation)
		}
	}
	return nil
}

// sameParent compares parentRefs after the CRD's defaulting (group
// gateway.networking.k8s.io, kind Gateway).
func sameParent(a, b *gatewayv1.ParentReference) bool {
	norm := func(p *gatewayv1.ParentReference) gatewayv1.ParentReference {
		q := *p.DeepCopy()
		if q.Group == nil {
			g := gatewayv1.Group(gatewayv1.GroupName)
			q.Group = &g
		}
		if q.Kind == nil {
			k := gatewayv1.Kind("Gateway")
			q.Kind = &k
		}
		return q
	}
	return equality.Semantic.DeepEqual(norm(a), norm(b))
}

func describeParent(p *gatewayv1.ParentReference) string {
	var b strings.Builder
	if p.Kind != nil {
		b.WriteString(string(*p.Kind))
	} else {
		b.WriteString("Gateway")
	}
	b.WriteString(" ")
	if p.Namespace != nil {
		b.WriteString(string(*p.Namespace) + "/")
	}
	b.WriteString(string(p.Name))
	if p.SectionName != nil {
		b.WriteString("#" + string(*p.SectionName))
	}
	return b.String()
}

// Expectations maps each route to the entries it must carry, one Want per
// controller.
type Expectations map[types.NamespacedName][]Want

// ExpectFixtures returns one Want per route of set: the fixtures'
// expectation for set.Config.ControllerName, any parentRef.
func ExpectFixtures(set *fixtures.Set) Expectations {
	out := make(Expectations, len(set.Routes))
	for i, r := range set.Routes {
		nn := types.NamespacedName{Namespace: r.Namespace, Name: r.Name}
		out[nn] = []Want{WantFor(set.Config.ControllerName, set.Expected[i])}
	}
	return out
}

// Census is how many of the expected routes were found and how many meet
// every Want.
type Census struct {
	Expected, Found, Converged int
	// Pending holds the first few reasons a route does not meet its Wants.
	Pending []string
}

// Done reports whether every expected route meets its Wants.
func (c Census) Done() bool { return c.Converged == c.Expected }

// Err is nil when Done, else an error with the counts and the first reasons.
func (c Census) Err() error {
	if c.Done() {
		return nil
	}
	return fmt.Errorf("%d of %d routes converged (%d found); e.g. %s", c.Converged, c.Expected, c.Found, strings.Join(c.Pending, "; "))
}

// Census checks routes; routes other than the expected ones are ignored.
func (e Expectations) Census(routes []gatewayv1.HTTPRoute) Census {
	c := Census{Expected: len(e)}
	for i := range routes {
		r := &routes[i]
		wants, ok := e[types.NamespacedName{Namespace: r.Namespace, Name: r.Name}]
		if !ok {
			continue
		}
		c.Found++
		var errs []error
		for _, w := range wants {
			if err := CheckRoute(r, w); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) == 0 {
			c.Converged++
		} else if len(c.Pending) < 3 {
			c.Pending = append(c.Pending, errors.Join(errs...).Error())
		}
	}
	if c.Found < c.Expected && len(c.Pending) < 3 {
		c.Pending = append(c.Pending, fmt.Sprintf("%d routes not found", c.Expected-c.Found))
	}
	return c
}

// ListRoutes lists the HTTPRoutes of every namespace, 500 per request.
func ListRoutes(ctx context.Context, gw gatewayclient.Interface) ([]gatewayv1.HTTPRoute, error) {
	var out []gatewayv1.HTTPRoute
	opts := metav1.ListOptions{Limit: 500}
	for {
		l, err := gw.GatewayV1().HTTPRoutes(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("examplee2e: listing HTTPRoutes: %w", err)
		}
		out = append(out, l.Items...)
		if l.Continue == "" {
			return out, nil
		}
		opts.Continue = l.Continue
	}
}

// WaitConverged lists the routes every interval until the Census of want
// is Done, calling progress (if not nil) with each Census. On ctx's end it
// returns the last Census and an error saying how far it got.
func WaitConverged(ctx context.Context, gw gatewayclient.Interface, want Expectations, interval time.Duration, progress func(Census)) (Census, error) {
	var last Census
	err := Poll(ctx, interval, func(ctx context.Context) error {
		routes, err := ListRoutes(ctx, gw)
		if err != nil {
			return err
		}
		last = want.Census(routes)
		if progress != nil {
			progress(last)
		}
		return last.Err()
	})
	if err != nil {
		return last, fmt.Errorf("examplee2e: routes not converged: %w", err)
	}
	return last, nil
}
