package controller

import (
	"context"
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
	want := opts.LeaseNamespace + "/" + DefaultLeaseName + "@" + testIdentity
	for _, p := range fc.statusPatches() {
		if p.FieldManager != want {
			t.Errorf("patch %s/%s: field manager %q, want %q", p.Namespace, p.Name, p.FieldManager, want)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// A Lease and identity too long for a fenced field manager with the
// longest shard Lease name are refused by New, naming what to shorten.
func TestNewFencedRejectsATooLongWriter(t *testing.T) {
	fc := newFakeCluster(t, 1)
	opts, _, _ := fc.options(t, strings.Repeat("i", 80))
	opts.Fence, opts.Shards = true, 16
	_, err := New(context.Background(), opts)
	if err == nil || !strings.Contains(err.Error(), "shorten Lease.Namespace, Lease.Name or Lease.Identity") {
		t.Errorf("New = %v, want an error saying what to shorten", err)
	}
	opts.Fence = false
	if _, err := New(context.Background(), opts); err != nil {
		t.Errorf("unfenced: %v", err)
	}
}
