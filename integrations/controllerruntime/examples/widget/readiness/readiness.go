// Package readiness is the Widget example's whole status logic: the
// conditions a Widget should have, computed from its spec.
package readiness

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	examplev1 "github.com/quietpatch/quietpatch/integrations/controllerruntime/examples/widget/api/v1"
)

// MaxSize is the largest size of a Ready Widget.
const MaxSize = 100

// Conditions returns the Widget's conditions: Ready True (reason Sized) up
// to MaxSize, False (reason TooLarge) above. The Computer completes them
// with observedGeneration and lastTransitionTime.
func Conditions(w *examplev1.Widget) ([]metav1.Condition, error) {
	if w.Spec.Size > MaxSize {
		return []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "TooLarge",
			Message: fmt.Sprintf("size %d is above %d", w.Spec.Size, MaxSize)}}, nil
	}
	return []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Sized",
		Message: fmt.Sprintf("size %d", w.Spec.Size)}}, nil
}
