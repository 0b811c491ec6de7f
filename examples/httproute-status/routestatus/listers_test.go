package routestatus

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"
	gatewayv1listers "sigs.k8s.io/gateway-api/pkg/client/listers/apis/v1"
	gatewayv1beta1listers "sigs.k8s.io/gateway-api/pkg/client/listers/apis/v1beta1"
)

func indexer(t *testing.T, objs ...runtime.Object) cache.Indexer {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, o := range objs {
		if err := idx.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return idx
}

// listersFor sorts objs into listers, as informers would hold them.
func listersFor(t *testing.T, v1beta1Grants bool, objs ...runtime.Object) Listers {
	var svcs, nss, gws, gcs, rgs, rgsBeta []runtime.Object
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Service:
			svcs = append(svcs, o)
		case *corev1.Namespace:
			nss = append(nss, o)
		case *gatewayv1.Gateway:
			gws = append(gws, o)
		case *gatewayv1.GatewayClass:
			gcs = append(gcs, o)
		case *gatewayv1.ReferenceGrant:
			if v1beta1Grants {
				rgsBeta = append(rgsBeta, (*gatewayv1beta1.ReferenceGrant)(o))
			} else {
				rgs = append(rgs, o)
			}
		default:
			t.Fatalf("unexpected %T", o)
		}
	}
	l := Listers{
		Services:       corev1listers.NewServiceLister(indexer(t, svcs...)),
		Namespaces:     corev1listers.NewNamespaceLister(indexer(t, nss...)),
		Gateways:       gatewayv1listers.NewGatewayLister(indexer(t, gws...)),
		GatewayClasses: gatewayv1listers.NewGatewayClassLister(indexer(t, gcs...)),
	}
	if v1beta1Grants {
		l.ReferenceGrantsV1beta1 = gatewayv1beta1listers.NewReferenceGrantLister(indexer(t, rgsBeta...))
	} else {
		l.ReferenceGrantsV1 = gatewayv1listers.NewReferenceGrantLister(indexer(t, rgs...))
	}
	return l
}

func TestListersMatchSnapshot(t *testing.T) {
	objs := with(world(), grant("other", routeNS, "remote"))
	r := route([]gatewayv1.ParentReference{
		gatewayRef(infraNS, "gw", "sel"), gatewayRef(infraNS, "gw", "nope"), gatewayRef(infraNS, "foreign", ""), serviceRef("", "mesh"),
	}, backend("", "backend"), backend("other", "remote"))
	want := newComputer(t, true).Compute(r, snapshot(t, objs...), t0)
	if len(want.Parents) != 3 {
		t.Fatalf("test setup: want 3 entries, got %+v", want.Parents)
	}
	for _, tt := range []struct {
		label   string
		v1beta1 bool
	}{{"v1 ReferenceGrants", false}, {"v1beta1 ReferenceGrants", true}} {
		t.Run(tt.label, func(t *testing.T) {
			got := newComputer(t, true).Compute(r, listersFor(t, tt.v1beta1, objs...), t0)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("via listers:\n%+v\nvia snapshot:\n%+v", got.Parents, want.Parents)
			}
		})
	}
	t.Run("zero Listers finds nothing", func(t *testing.T) {
		var l Listers
		if _, ok := l.Service("a", "b"); ok {
			t.Error("Service found")
		}
		if _, ok := l.Gateway("a", "b"); ok {
			t.Error("Gateway found")
		}
		if _, ok := l.GatewayClass("a"); ok {
			t.Error("GatewayClass found")
		}
		if _, ok := l.Namespace("a"); ok {
			t.Error("Namespace found")
		}
		if l.ReferenceGrants("a") != nil {
			t.Error("ReferenceGrants found")
		}
	})
}
