package base_test

import (
	"errors"
	"fmt"
	"maps"
	"testing"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

func TestConfigError(t *testing.T) {
	err := error(&base.ConfigError{Field: "RenewGrace", Reason: "must be < LeaseDuration (15s), got 20s"})
	if got, want := err.Error(), "quietpatch: invalid config: RenewGrace must be < LeaseDuration (15s), got 20s"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, base.ErrInvalidConfig) {
		t.Error("a ConfigError does not wrap ErrInvalidConfig")
	}
}

func TestLifecycle(t *testing.T) {
	var l base.Lifecycle
	for _, step := range []struct {
		label            string
		do               func() error
		wantErr          error
		started, running bool
		why              error
	}{
		{"zero", nil, nil, false, false, nil},
		{"start", l.Start, nil, true, true, nil},
		{"second start", l.Start, base.ErrAlreadyStarted, true, true, nil},
		{"stop", func() error { l.Stop(errors.New("lease lost")); return nil }, nil, true, false, errors.New("lease lost")},
		{"start after stop", l.Start, base.ErrAlreadyStarted, true, false, errors.New("lease lost")},
	} {
		if step.do != nil {
			if err := step.do(); !errors.Is(err, step.wantErr) {
				t.Errorf("%s: %v, want %v", step.label, err, step.wantErr)
			}
		}
		started, running, why := l.State()
		if started != step.started || running != step.running || (why == nil) != (step.why == nil) || why != nil && why.Error() != step.why.Error() {
			t.Errorf("%s: State() = %v, %v, %v; want %v, %v, %v", step.label, started, running, why, step.started, step.running, step.why)
		}
	}
}

func TestCounters(t *testing.T) {
	c := base.NewCounters(outcome.OK, outcome.Conflict, outcome.Timeout)
	c.Add(outcome.OK)
	c.Add(outcome.OK)
	c.Add(outcome.Timeout)
	c.Add(outcome.Failed) // not a key: not counted
	if got, want := c.Snapshot(), map[outcome.Outcome]int64{outcome.OK: 2, outcome.Timeout: 1}; !maps.Equal(got, want) {
		t.Errorf("Snapshot() = %v, want %v", got, want)
	}
	if c.Get(outcome.Conflict) != 0 || c.Get(outcome.Failed) != 0 || c.Get(outcome.OK) != 2 {
		t.Errorf("Get: conflict %d, error %d, ok %d", c.Get(outcome.Conflict), c.Get(outcome.Failed), c.Get(outcome.OK))
	}
	keys := c.Keys()
	keys[0] = "changed"
	if c.Keys()[0] != outcome.OK {
		t.Error("Keys() shares the counters' slice")
	}
}

func TestPrefix(t *testing.T) {
	err := base.Prefix("Lease.", fmt.Errorf("claimer: %w", &base.ConfigError{Field: "RenewGrace", Reason: "must be > 0"}))
	var ce *base.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Lease.RenewGrace" || ce.Reason != "must be > 0" {
		t.Errorf("Prefix = %v, want the field Lease.RenewGrace", err)
	}
	other := errors.New("not a config error")
	if got := base.Prefix("Lease.", other); got != other {
		t.Errorf("Prefix of another error = %v, want it unchanged", got)
	}
}
