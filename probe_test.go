package quietpatch_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/quietpatch/quietpatch"
)

func TestProbeHandler(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		code     int
		contains string
	}{
		{"check passes", nil, http.StatusOK, "ok"},
		{"check fails", errors.New("quietpatch: caches not synced"), http.StatusServiceUnavailable, "caches not synced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			quietpatch.ProbeHandler(func() error { return tc.err }).ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
			if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.contains) {
				t.Errorf("got %d %q, want %d containing %q", rec.Code, rec.Body.String(), tc.code, tc.contains)
			}
		})
	}
}
