package routestatus

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func TestMergePatch(t *testing.T) {
	r := route([]gatewayv1.ParentReference{serviceRef("", "mesh")})
	one := makeStatus([]gatewayv1.RouteParentStatus{{
		ParentRef:      serviceRef("", "mesh"),
		ControllerName: testController,
		Conditions: []metav1.Condition{{
			Type: "Accepted", Status: "True", Reason: "Accepted", Message: "ok",
			ObservedGeneration: 3, LastTransitionTime: metav1.NewTime(t0),
		}},
	}})
	invalid := makeStatus([]gatewayv1.RouteParentStatus{{ParentRef: serviceRef("", "mesh"), ControllerName: testController}})
	noRV := r.DeepCopy()
	noRV.ResourceVersion = ""

	tests := []struct {
		label   string
		route   *gatewayv1.HTTPRoute
		desired gatewayv1.HTTPRouteStatus
		want    string
		err     error
	}{
		{
			label:   "one entry; group \"\" kept; whole list sent",
			route:   r,
			desired: one,
			want: `{"metadata":{"resourceVersion":"42"},"status":{"parents":[{"parentRef":{"group":"","kind":"Service","name":"mesh"},` +
				`"controllerName":"example.net/quietpatch","conditions":[{"type":"Accepted","status":"True","observedGeneration":3,` +
				`"lastTransitionTime":"2026-01-02T03:04:05Z","reason":"Accepted","message":"ok"}]}]}}`,
		},
		{label: "nil parents sent as []", route: r, desired: gatewayv1.HTTPRouteStatus{},
			want: `{"metadata":{"resourceVersion":"42"},"status":{"parents":[]}}`},
		{label: "nil route", desired: one, err: ErrNilRoute},
		{label: "no resourceVersion", route: noRV, desired: one, err: ErrNoResourceVersion},
		{label: "invalid status (no conditions)", route: r, desired: invalid, err: ErrInvalidStatus},
	}
	for _, tt := range tests {
		t.Run(tt.label, func(t *testing.T) {
			got, err := MergePatch(tt.route, tt.desired)
			if tt.err != nil {
				if !errors.Is(err, tt.err) || got != nil {
					t.Fatalf("MergePatch = %s, %v; want error %v", got, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("MergePatch =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}

	t.Run("round trip of a computed status", func(t *testing.T) {
		r := route([]gatewayv1.ParentReference{gatewayRef(infraNS, "gw", ""), serviceRef("", "mesh")}, backend("", "nope"))
		desired := newComputer(t, true).Compute(r, snapshot(t, world()...), t0)
		b, err := MergePatch(r, desired)
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Metadata map[string]any `json:"metadata"`
			Status   struct {
				Parents []gatewayv1.RouteParentStatus `json:"parents"`
			} `json:"status"`
		}
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(p.Metadata, map[string]any{"resourceVersion": "42"}) {
			t.Errorf("metadata = %v", p.Metadata)
		}
		decoded := makeStatus(p.Status.Parents)
		if !Equal(decoded, desired) || len(decoded.Parents) != 2 {
			t.Fatalf("decoded parents differ from desired:\n%+v\n%+v", p.Status.Parents, desired.Parents)
		}
		for i := range desired.Parents {
			if !reflect.DeepEqual(decoded.Parents[i].ParentRef, desired.Parents[i].ParentRef) {
				t.Errorf("parents[%d].parentRef = %+v, want %+v", i, decoded.Parents[i].ParentRef, desired.Parents[i].ParentRef)
			}
			for j, c := range desired.Parents[i].Conditions {
				if got := decoded.Parents[i].Conditions[j].LastTransitionTime; !got.Equal(&c.LastTransitionTime) {
					t.Errorf("parents[%d].conditions[%d].lastTransitionTime = %v, want %v", i, j, got, c.LastTransitionTime)
				}
			}
		}
	})
}
