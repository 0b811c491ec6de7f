package examplee2e

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/quietpatch/quietpatch/e2e/cluster"
)

// Install creates objs on the control plane as the admin (no client rate
// limit), in order: consecutive objects of the same type are created
// concurrently, up to concurrency at a time (at least 1), and a type starts
// only when the one before it is done, so namespaces exist before what they
// hold. Objects that exist already are left alone. progress, if not nil, is
// called after each object with the number done and the total, from one
// goroutine at a time.
//
// Supported types: Namespace, Service, GatewayClass, Gateway,
// ReferenceGrant and HTTPRoute (everything fixtures.Set.Objects returns).
func Install(ctx context.Context, cp *cluster.ControlPlane, objs []runtime.Object, concurrency int, progress func(done, total int)) error {
	concurrency = max(concurrency, 1)
	var (
		done   atomic.Int64
		progMu sync.Mutex
	)
	report := func() {
		n := done.Add(1)
		if progress != nil {
			progMu.Lock()
			progress(int(n), len(objs))
			progMu.Unlock()
		}
	}
	for start := 0; start < len(objs); {
		end := start + 1
		for end < len(objs) && reflect.TypeOf(objs[end]) == reflect.TypeOf(objs[start]) {
			end++
		}
		batch := objs[start:end]
		start = end

		next := make(chan runtime.Object)
		errs := make(chan error, concurrency)
		var wg sync.WaitGroup
		for range min(concurrency, len(batch)) {
			wg.Go(func() {
				for o := range next {
					if err := create(ctx, cp, o); err != nil {
						errs <- err
						return
					}
					report()
				}
			})
		}
		var firstErr error
	feed:
		for _, o := range batch {
			select {
			case next <- o:
			case firstErr = <-errs:
				break feed
			case <-ctx.Done():
				firstErr = ctx.Err()
				break feed
			}
		}
		close(next)
		wg.Wait()
		close(errs)
		if firstErr == nil {
			firstErr = <-errs
		}
		if firstErr != nil {
			return firstErr
		}
	}
	return nil
}

func create(ctx context.Context, cp *cluster.ControlPlane, o runtime.Object) error {
	opts := metav1.CreateOptions{FieldManager: fieldManager}
	kube, gw := cp.AdminClient(), cp.AdminGatewayClient().GatewayV1()
	var err error
	switch o := o.(type) {
	case *corev1.Namespace:
		_, err = kube.CoreV1().Namespaces().Create(ctx, o, opts)
	case *corev1.Service:
		_, err = kube.CoreV1().Services(o.Namespace).Create(ctx, o, opts)
	case *gatewayv1.GatewayClass:
		_, err = gw.GatewayClasses().Create(ctx, o, opts)
	case *gatewayv1.Gateway:
		_, err = gw.Gateways(o.Namespace).Create(ctx, o, opts)
	case *gatewayv1.ReferenceGrant:
		_, err = gw.ReferenceGrants(o.Namespace).Create(ctx, o, opts)
	case *gatewayv1.HTTPRoute:
		_, err = gw.HTTPRoutes(o.Namespace).Create(ctx, o, opts)
	default:
		return fmt.Errorf("examplee2e: Install does not support %T", o)
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("examplee2e: creating %T: %w", o, err)
	}
	return nil
}

// DeleteRoutes deletes every HTTPRoute in the namespaces (one
// deletecollection each). HTTPRoutes carry no finalizers, so they are gone
// when it returns, even without a controller manager.
func DeleteRoutes(ctx context.Context, cp *cluster.ControlPlane, namespaces ...string) error {
	for _, ns := range namespaces {
		err := cp.AdminGatewayClient().GatewayV1().HTTPRoutes(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("examplee2e: deleting HTTPRoutes in %s: %w", ns, err)
		}
	}
	return nil
}
