package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quietpatch/quietpatch/examples/httproute-status/fixtures"
)

// With Fence, every status write names its writer: the field manager, the
// Lease and this replica's identity, which the fence's
// ValidatingAdmissionPolicy checks against the Lease's holder.
func TestRunFenced(t *testing.T) {
	fc := newFakeCluster(t, fixtures.NumCases)
	opts, _, _ := fc.options(t, testIdentity)
	opts.Fence = true
	c, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	stop, _ := runAsync(t, c)
	eventually(t, 10*time.Second, "every route gets its expected status", fc.checkAllRoutes)
	want := DefaultFieldManager + "@" + DefaultLeaseName + "@" + testIdentity
	for _, p := range fc.statusPatches() {
		if p.FieldManager != want {
			t.Errorf("patch %s/%s: field manager %q, want %q", p.Namespace, p.Name, p.FieldManager, want)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// A field manager the fence cannot extend, or one too long for the Lease
// names and the identity, is refused by New, naming the field.
func TestNewFencedRejectsFieldManagers(t *testing.T) {
	fc := newFakeCluster(t, 1)
	for name, mutate := range map[string]func(*Options){
		"@ in the field manager": func(o *Options) { o.FieldManager = "a@b" },
		"too long with shards":   func(o *Options) { o.FieldManager = strings.Repeat("f", 100); o.Shards = 16 },
	} {
		opts, _, _ := fc.options(t, testIdentity)
		opts.Fence = true
		mutate(&opts)
		_, err := New(context.Background(), opts)
		if err == nil || !strings.Contains(err.Error(), "FieldManager") && !strings.Contains(err.Error(), "fieldManager") {
			t.Errorf("%s: New = %v, want an error naming the field manager", name, err)
		}
		var oe *OptionError
		if name == "@ in the field manager" && !errors.As(err, &oe) {
			t.Errorf("%s: %v is not an OptionError", name, err)
		}
	}
}
