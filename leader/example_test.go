package leader_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/leader"
)

// A claim is current for its holder until its expiry, on the observer's
// clock; Remaining bounds the deadline of work done under it.
func ExampleClaim() {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	c := leader.Claim{Holder: "replica-a", Expiry: now.Add(12 * time.Second), Epoch: 7}

	fmt.Println(c.IsCurrentFor("replica-a", now), c.IsCurrentFor("replica-b", now))
	fmt.Println(c.Remaining(now))
	fmt.Println(c.IsCurrent(now.Add(12*time.Second)), c.Remaining(now.Add(time.Minute)))
	// Output:
	// true false
	// 12s
	// false 0s
}

// Fencing: work is tagged with the epoch it was produced under and applied
// only while that same claim is still ours.
func ExampleClaim_fencing() {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	type item struct {
		key   string
		epoch int64
	}
	current := leader.Claim{Holder: "me", Expiry: now.Add(10 * time.Second), Epoch: 8}
	for _, it := range []item{{"route-a", 8}, {"route-b", 7}} {
		if current.IsCurrentFor("me", now) && it.epoch == current.Epoch {
			fmt.Printf("%s: apply, deadline in %v\n", it.key, min(5*time.Second, current.Remaining(now)))
		} else {
			fmt.Printf("%s: drop, produced under epoch %d\n", it.key, it.epoch)
		}
	}
	// Output:
	// route-a: apply, deadline in 5s
	// route-b: drop, produced under epoch 7
}

// Impossible configurations are rejected at construction, naming the field.
func ExampleNewClaimer_invalidConfig() {
	client := fake.NewSimpleClientset()
	_, err := leader.NewClaimer(client.CoordinationV1(), leader.Config{
		Namespace:     "kube-system",
		Name:          "my-controller",
		Identity:      "pod-1_4f7c",
		LeaseDuration: 15 * time.Second,
		RenewGrace:    20 * time.Second,
	})
	fmt.Println(err)
	fmt.Println(errors.Is(err, quietpatch.ErrInvalidConfig))
	// Output:
	// quietpatch: invalid config: RenewGrace must be < LeaseDuration (15s), got 20s
	// true
}

// A replica runs the claimer for the life of the process, follows the
// claim through Subscribe, and vacates the Lease when it shuts down. With a
// real cluster, pass clientset.CoordinationV1() of a kubernetes.Clientset.
func ExampleClaimer() {
	client := fake.NewSimpleClientset()
	claimer, err := leader.NewClaimer(client.CoordinationV1(), leader.Config{
		Namespace: "default",
		Name:      "my-controller",
		Identity:  "replica-a",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	changes, unsubscribe := claimer.Subscribe()
	defer unsubscribe()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- claimer.Run(ctx) }()

	for c := range changes {
		if c.IsCurrentFor(claimer.Identity(), time.Now()) {
			fmt.Printf("leading under epoch %d\n", c.Epoch)
			break
		}
	}

	cancel() // shutting down: Run vacates the Lease
	fmt.Println("Run:", <-done)
	lease, err := client.CoordinationV1().Leases("default").Get(context.Background(), "my-controller", metav1.GetOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("holder after shutdown: %q, transitions %d\n", ptrOr(lease.Spec.HolderIdentity), *lease.Spec.LeaseTransitions)
	fmt.Println("ready:", claimer.Ready() == nil)
	// Output:
	// leading under epoch 1
	// Run: context canceled
	// holder after shutdown: "", transitions 1
	// ready: false
}

// Ready serves a readiness probe: not ready before Run starts, nor after it
// has returned (say, because RBAC forbids updating the Lease).
func ExampleClaimer_Ready() {
	client := fake.NewSimpleClientset()
	claimer, err := leader.NewClaimer(client.CoordinationV1(), leader.Config{
		Namespace: "default", Name: "my-controller", Identity: "replica-a",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	readyz := func(w http.ResponseWriter, _ *http.Request) {
		if err := claimer.Ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	}
	http.NewServeMux().HandleFunc("/readyz", readyz)
	fmt.Println(claimer.Ready())
	fmt.Println(errors.Is(claimer.Ready(), leader.ErrNotRunning))
	// Output:
	// leader: claimer not running: Run not called
	// true
}

func ptrOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
