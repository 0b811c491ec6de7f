package controllerruntime

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Options.PatchQPS follows client-go's convention, negative for no
// client-side limit, and its zero value is the library's default: no limit
// either. The rest.Config patchLimit gives is checked against client-go's
// own reading of it (rest.RESTClientFor's rate limiter).
func TestPatchLimit(t *testing.T) {
	tests := []struct {
		qps       float32
		burst     int
		wantQPS   float32
		wantBurst int
		limited   bool
	}{
		{0, 0, -1, 0, false},  // the zero value: the library's default, no limit
		{0, 7, -1, 0, false},  // a burst without a QPS changes nothing
		{-1, 0, -1, 0, false}, // client-go's "no limit"
		{-5, 3, -1, 0, false},
		{10, 0, 10, 10, true}, // burst defaults to the QPS
		{0.5, 0, 0.5, 1, true},
		{20, 30, 20, 30, true},
	}
	for _, tt := range tests {
		qps, burst := patchLimit(tt.qps, tt.burst)
		if qps != tt.wantQPS || burst != tt.wantBurst {
			t.Errorf("patchLimit(%v, %d) = %v, %d; want %v, %d", tt.qps, tt.burst, qps, burst, tt.wantQPS, tt.wantBurst)
		}
		rc := &rest.Config{Host: "https://127.0.0.1:1", QPS: qps, Burst: burst}
		rc.GroupVersion = &corev1.SchemeGroupVersion
		rc.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
		c, err := rest.RESTClientFor(rc)
		if err != nil {
			t.Fatal(err)
		}
		limiter := c.GetRateLimiter()
		if limited := limiter != nil && limiter.QPS() > 0; limited != tt.limited {
			t.Errorf("PatchQPS %v, PatchBurst %d: client-go's rate limiter %v (QPS %v), want limited %v", tt.qps, tt.burst, limiter, qpsOf(limiter), tt.limited)
		}
	}
}

func qpsOf(l flowcontrol.RateLimiter) float32 {
	if l == nil {
		return 0
	}
	return l.QPS()
}
