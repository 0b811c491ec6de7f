package conditions_test

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quietpatch/quietpatch/statuspatch/conditions"
)

// A typed comparison of conditions ignores what changes on its own
// (LastTransitionTime) and list order, without allocating. CmpEqual gives
// the same answers through go-cmp at a thousand times the cost.
func ExampleEqual() {
	t1 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t2 := metav1.NewTime(t1.Add(time.Hour))
	current := []metav1.Condition{
		{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", LastTransitionTime: t1},
		{Type: "ResolvedRefs", Status: metav1.ConditionTrue, Reason: "ResolvedRefs", LastTransitionTime: t1},
	}
	desired := []metav1.Condition{
		{Type: "ResolvedRefs", Status: metav1.ConditionTrue, Reason: "ResolvedRefs", LastTransitionTime: t2},
		{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", LastTransitionTime: t2},
	}
	gocmp := conditions.CmpEqual[[]metav1.Condition](conditions.IgnoreTransitionTime(), conditions.SortByType())
	fmt.Println(conditions.Equal(current, desired), gocmp(current, desired))

	desired[0].Status = metav1.ConditionFalse
	desired[0].Reason = "BackendNotFound"
	fmt.Println(conditions.Equal(current, desired), gocmp(current, desired))
	// Output:
	// true true
	// false false
}
