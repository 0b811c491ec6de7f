package statuspatch_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/quietpatch/quietpatch"
	"github.com/quietpatch/quietpatch/statuspatch"
)

// PatchQueue is a facade over internal/queue, whose tests have the rules;
// these check what the facade adds: the capacity checked, the lanes and
// errors passed through, a clock for the stamps and the depth's
// Peak-EWMA.

func TestNewPatchQueue(t *testing.T) {
	for _, tc := range []struct {
		label    string
		capacity int
		wantErr  bool
	}{
		{label: "one", capacity: 1},
		{label: "three", capacity: 3},
		{label: "zero", capacity: 0, wantErr: true},
		{label: "negative", capacity: -1, wantErr: true},
	} {
		t.Run(tc.label, func(t *testing.T) {
			q, err := statuspatch.NewPatchQueue[int](tc.capacity)
			if tc.wantErr {
				var ce *quietpatch.ConfigError
				if !errors.As(err, &ce) || ce.Field != "capacity" || !errors.Is(err, quietpatch.ErrInvalidConfig) {
					t.Fatalf("NewPatchQueue(%d) error %v, want a ConfigError for capacity wrapping ErrInvalidConfig", tc.capacity, err)
				}
				if q != nil {
					t.Error("a queue returned with an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			if q.Cap() != tc.capacity || q.Stats() != (statuspatch.QueueStats{}) {
				t.Errorf("new queue: Cap %d Stats %+v; want Cap %d, empty", q.Cap(), q.Stats(), tc.capacity)
			}
		})
	}
}

// SetCapacity below 1 is rejected and changes nothing; a shrink keeps the
// keys waiting and refuses new ones; a growth admits more at once.
func TestPatchQueueSetCapacity(t *testing.T) {
	q, err := statuspatch.NewPatchQueue[string](1)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for _, n := range []int{0, -1} {
		var ce *quietpatch.ConfigError
		if err := q.SetCapacity(n); !errors.As(err, &ce) || ce.Field != "capacity" {
			t.Errorf("SetCapacity(%d) = %v, want a ConfigError for capacity", n, err)
		}
	}
	if q.Cap() != 1 {
		t.Fatalf("Cap %d after rejected changes, want 1", q.Cap())
	}
	steps := []struct {
		label string
		do    func() error
		want  error
	}{
		{"add a", func() error { return q.Add("a", statuspatch.LaneFresh) }, nil},
		{"add b: full", func() error { return q.Add("b", statuspatch.LaneFresh) }, statuspatch.ErrFull},
		{"grow to 2", func() error { return q.SetCapacity(2) }, nil},
		{"add b", func() error { return q.Add("b", statuspatch.LaneFresh) }, nil},
		{"shrink to 1", func() error { return q.SetCapacity(1) }, nil},
		{"add c: full", func() error { return q.Add("c", statuspatch.LaneFresh) }, statuspatch.ErrFull},
	}
	for _, s := range steps {
		if err := s.do(); !errors.Is(err, s.want) || (err == nil) != (s.want == nil) {
			t.Fatalf("%s: %v, want %v", s.label, err, s.want)
		}
	}
	if s := q.Stats(); s.Depth != 2 || s.DroppedFull != 2 || q.Cap() != 1 {
		t.Errorf("Stats %+v, Cap %d; want both keys waiting, 2 dropped full, Cap 1", s, q.Cap())
	}
}

// TestPatchQueueFacade runs every method once through the facade: lanes
// (any value other than the two constants is the pass lane), permits,
// errors, Stats with the depth's Peak-EWMA on the real clock.
func TestPatchQueueFacade(t *testing.T) {
	q, err := statuspatch.NewPatchQueue[string](1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := q.Add("p", statuspatch.Lane(7)); err != nil { // the pass lane
		t.Fatal(err)
	}
	if _, err := q.Reserve(statuspatch.LanePass); !errors.Is(err, statuspatch.ErrFull) {
		t.Fatalf("Reserve on the full pass lane: %v, want ErrFull", err)
	}
	permit, err := q.Reserve(statuspatch.LaneFresh)
	if err != nil {
		t.Fatal(err)
	}
	if err := permit.Send("f"); err != nil {
		t.Fatal(err)
	}
	if err := permit.Send("g"); !errors.Is(err, statuspatch.ErrClosed) {
		t.Errorf("a second Send: %v, want ErrClosed", err)
	}
	permit.Release() // used: harmless
	if got := q.Stats(); got.Depth != 2 || got.Fresh != 1 || got.DepthPeak < 1.99 || got.DepthPeak > 2 {
		t.Errorf("Stats %+v: want 2 waiting, 1 fresh, DepthPeak about 2", got)
	}
	for _, want := range []string{"f", "p"} { // fresh first
		key, err := q.Get(ctx)
		if err != nil || key != want {
			t.Fatalf("Get = %q, %v; want %q", key, err, want)
		}
		q.Done(key)
	}
	var zero statuspatch.Permit[string]
	if err := zero.Send("z"); !errors.Is(err, statuspatch.ErrClosed) {
		t.Errorf("the zero Permit: %v, want ErrClosed", err)
	}
	zero.Release()
	q.Close()
	if err := q.Add("a", statuspatch.LaneFresh); !errors.Is(err, statuspatch.ErrClosed) {
		t.Errorf("Add after Close: %v, want ErrClosed", err)
	}
	if _, err := q.Get(ctx); !errors.Is(err, statuspatch.ErrClosed) {
		t.Errorf("Get of a closed, drained queue: %v, want ErrClosed", err)
	}
	want := statuspatch.QueueStats{Enqueued: 2, Dequeued: 2, DroppedFull: 1, DroppedClosed: 1}
	if d := cmp.Diff(want, q.Stats(), cmpopts.IgnoreFields(statuspatch.QueueStats{}, "DepthPeak")); d != "" {
		t.Errorf("Stats (-want +got):\n%s", d)
	}
}
