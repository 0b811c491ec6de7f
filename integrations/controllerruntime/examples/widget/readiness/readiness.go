// Package readiness is the Widget example's whole status logic: the
// conditions a Widget should have, computed from its spec under the
// Widgets' policy.
package readiness

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	examplev1 "github.com/quietpatch/quietpatch/integrations/controllerruntime/examples/widget/api/v1"
)

// MaxSize is the largest size of a Ready Widget unless the policy
// ConfigMap sets another.
const MaxSize = 100

// PolicyMaxSize is the key of the policy ConfigMap's data that sets the
// largest size of a Ready Widget.
const PolicyMaxSize = "maxSize"

// Policy is what the Widgets' conditions depend on besides their spec.
type Policy struct {
	// MaxSize is the largest size of a Ready Widget.
	MaxSize int32
}

// PolicyFrom reads the policy from its ConfigMap: data.maxSize, a
// non-negative integer; MaxSize when cm is nil (there is none) or has no
// such key.
func PolicyFrom(cm *corev1.ConfigMap) (Policy, error) {
	v, ok := "", false
	if cm != nil {
		v, ok = cm.Data[PolicyMaxSize]
	}
	if !ok {
		return Policy{MaxSize: MaxSize}, nil
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < 0 {
		return Policy{}, fmt.Errorf("policy ConfigMap %s/%s: data.%s is %q, want a non-negative integer", cm.Namespace, cm.Name, PolicyMaxSize, v)
	}
	return Policy{MaxSize: int32(n)}, nil
}

// Conditions returns the Widget's conditions under the default policy
// (MaxSize).
func Conditions(w *examplev1.Widget) ([]metav1.Condition, error) {
	return Policy{MaxSize: MaxSize}.Conditions(w)
}

// Conditions returns the Widget's conditions under p: Ready True (reason
// Sized) up to p.MaxSize, False (reason TooLarge) above. The Computer
// completes them with observedGeneration and lastTransitionTime.
func (p Policy) Conditions(w *examplev1.Widget) ([]metav1.Condition, error) {
	if w.Spec.Size > p.MaxSize {
		return []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "TooLarge",
			Message: fmt.Sprintf("size %d is above %d", w.Spec.Size, p.MaxSize)}}, nil
	}
	return []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Sized",
		Message: fmt.Sprintf("size %d", w.Spec.Size)}}, nil
}
