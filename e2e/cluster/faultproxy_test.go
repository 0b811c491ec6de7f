package cluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// fakeUpstream is a TLS server standing in for the API server: /whoami
// echoes the Authorization header, /write records the request body,
// /stream writes a line every 20 ms until the request ends.
type fakeUpstream struct {
	srv    *httptest.Server
	hits   atomic.Int64
	writes atomic.Int64
	body   atomic.Value // string: the last body /write received
	held   chan heldRequest
}

// heldRequest is what /held saw of a request: when its handler started
// (the headers had arrived) and when its body had been read.
type heldRequest struct {
	headers, bodyAt time.Time
	body            string
	err             error
}

func newProxyUnderTest(t *testing.T) (*FaultProxy, *fakeUpstream, *http.Client) {
	t.Helper()
	pk, err := newPKI()
	if err != nil {
		t.Fatal(err)
	}
	up := &fakeUpstream{held: make(chan heldRequest, 4)}
	mux := http.NewServeMux()
	mux.HandleFunc("/held", func(w http.ResponseWriter, r *http.Request) {
		h := heldRequest{headers: time.Now()}
		b, err := io.ReadAll(r.Body)
		h.body, h.bodyAt, h.err = string(b), time.Now(), err
		up.held <- h
		fmt.Fprint(w, "held write done")
	})
	mux.HandleFunc("/whoami", func(w http.ResponseWriter, r *http.Request) {
		up.hits.Add(1)
		fmt.Fprintf(w, "auth=%s", r.Header.Get("Authorization"))
	})
	mux.HandleFunc("/write", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		up.body.Store(string(b))
		up.writes.Add(1)
		fmt.Fprint(w, "written")
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		up.hits.Add(1)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			fmt.Fprintf(w, "event %d\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-t.C:
			}
		}
	})
	up.srv = httptest.NewUnstartedServer(mux)
	up.srv.TLS = &tls.Config{Certificates: []tls.Certificate{pk.servingCert}}
	up.srv.StartTLS()
	t.Cleanup(up.srv.Close)

	cp := &ControlPlane{pki: pk, ports: Ports{APIServer: up.srv.Listener.Addr().(*net.TCPAddr).Port}, proxies: map[*FaultProxy]struct{}{}}
	p, err := cp.NewFaultProxy()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pk.caPEM)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	return p, up, &http.Client{Transport: tr}
}

func whoami(ctx context.Context, c *http.Client, p *FaultProxy) (*http.Response, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL()+"/whoami", nil)
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Authorization", "Bearer token-1")
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// waitStats polls the proxy's stats until ok accepts them.
func waitStats(t *testing.T, p *FaultProxy, what string, ok func(ProxyStats) bool) {
	t.Helper()
	eventually(t, 5*time.Second, what, func() error {
		if s := p.Stats(); !ok(s) {
			return fmt.Errorf("stats %+v", s)
		}
		return nil
	})
}

func TestFaultProxyForwardsAndInjects(t *testing.T) {
	p, up, c := newProxyUnderTest(t)
	ctx := testContext(t, time.Minute)

	t.Run("forwards Authorization", func(t *testing.T) {
		resp, body, err := whoami(ctx, c, p)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || body != "auth=Bearer token-1" {
			t.Fatalf("got %d %q, want 200 auth=Bearer token-1", resp.StatusCode, body)
		}
	})

	for _, tc := range []struct {
		label     string
		fault     Fault
		wantCode  int
		wantRetry string
		wantBody  string
	}{
		{"503 by default", Fault{ErrorProbability: 1}, 503, "", `"reason":"ServiceUnavailable","code":503}` + "\n"},
		{"503 with Retry-After in the header and the details", Fault{ErrorProbability: 1, RetryAfter: time.Second}, 503, "1",
			`"reason":"ServiceUnavailable","details":{"retryAfterSeconds":1},"code":503}` + "\n"},
		{"429 as Priority and Fairness answers, Retry-After rounded up", Fault{ErrorProbability: 1, ErrorCode: 429, RetryAfter: 1500 * time.Millisecond}, 429, "2",
			"Too many requests, please try again later.\n"},
		{"500", Fault{ErrorProbability: 1, ErrorCode: 500}, 500, "", `"reason":"InternalError","code":500}` + "\n"},
	} {
		t.Run(tc.label, func(t *testing.T) {
			defer p.ClearFault()
			if err := p.SetFault(tc.fault); err != nil {
				t.Fatal(err)
			}
			hits, errs := up.hits.Load(), p.Stats().Errors
			resp, body, err := whoami(ctx, c, p)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.wantCode || resp.Header.Get("Retry-After") != tc.wantRetry || !strings.HasSuffix(body, tc.wantBody) {
				t.Fatalf("got %d Retry-After %q body %q; want %d %q body ending in %q", resp.StatusCode, resp.Header.Get("Retry-After"), body, tc.wantCode, tc.wantRetry, tc.wantBody)
			}
			if up.hits.Load() != hits {
				t.Error("an injected error reached the upstream")
			}
			if got := p.Stats().Errors; got != errs+1 {
				t.Errorf("Stats.Errors = %d, want %d", got, errs+1)
			}
		})
	}

	// What matters of an injected answer: client-go's error says how long
	// to wait, whether the answer is text (429) or a Status (5xx).
	for _, code := range []int{429, 503} {
		t.Run(fmt.Sprintf("client-go sees the Retry-After of a %d", code), func(t *testing.T) {
			defer p.ClearFault()
			if err := p.SetFault(Fault{ErrorProbability: 1, ErrorCode: code, RetryAfter: 3 * time.Second}); err != nil {
				t.Fatal(err)
			}
			rc, err := rest.UnversionedRESTClientFor(&rest.Config{
				Host: p.URL(), TLSClientConfig: rest.TLSClientConfig{CAData: p.cp.pki.caPEM},
				ContentConfig: rest.ContentConfig{NegotiatedSerializer: scheme.Codecs.WithoutConversion()},
			})
			if err != nil {
				t.Fatal(err)
			}
			err = rc.Get().AbsPath("/whoami").MaxRetries(0).Do(ctx).Error()
			if secs, ok := apierrors.SuggestsClientDelay(err); !ok || secs != 3 {
				t.Errorf("SuggestsClientDelay(%v) = %d, %v; want 3, true", err, secs, ok)
			}
		})
	}

	t.Run("latency", func(t *testing.T) {
		defer p.ClearFault()
		if err := p.SetFault(Fault{Latency: 200 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		if _, _, err := whoami(ctx, c, p); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(begin); d < 200*time.Millisecond {
			t.Errorf("request took %v, want >= 200ms", d)
		}
	})

	// A client that gives up while its request waits out Latency: without
	// Detach nothing reaches the upstream; with Detach the whole request
	// does, after Latency, as a write already on its way would.
	for _, detach := range []bool{false, true} {
		t.Run(fmt.Sprintf("latency, client gives up, detach=%v", detach), func(t *testing.T) {
			defer p.ClearFault()
			const latency = 300 * time.Millisecond
			if err := p.SetFault(Fault{Latency: latency, Detach: detach}); err != nil {
				t.Fatal(err)
			}
			writes, detached := up.writes.Load(), p.Stats().Detached
			rctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(rctx, http.MethodPost, p.URL()+"/write", strings.NewReader("body-1"))
			begin := time.Now()
			if resp, err := c.Do(req); !errors.Is(err, context.DeadlineExceeded) {
				if err == nil {
					resp.Body.Close()
				}
				t.Fatalf("got %v, want the client's deadline", err)
			}
			// Every request ends in the proxy (the detached one once the
			// upstream answered it) ...
			waitStats(t, p, "the request ends in the proxy", func(s ProxyStats) bool { return s.InFlight == 0 && s.Delaying == 0 })
			got := up.writes.Load() - writes
			if !detach {
				if got != 0 {
					t.Errorf("%d writes reached the upstream after the client gave up, want 0", got)
				}
				return
			}
			// ... and the detached one reached the upstream, whole, no
			// earlier than Latency after it was sent.
			if got != 1 || up.body.Load() != "body-1" {
				t.Fatalf("%d writes reached the upstream (last body %v), want 1 with body-1", got, up.body.Load())
			}
			if d := time.Since(begin); d < latency {
				t.Errorf("the detached request was answered %v after it was sent, want >= %v", d, latency)
			}
			if s := p.Stats(); s.Detached != detached+1 {
				t.Errorf("Stats.Detached = %d, want %d", s.Detached, detached+1)
			}
		})
	}

	t.Run("match selects requests", func(t *testing.T) {
		defer p.ClearFault()
		if err := p.SetFault(Fault{ErrorProbability: 1, Match: func(r *http.Request) bool { return r.URL.Path == "/other" }}); err != nil {
			t.Fatal(err)
		}
		resp, _, err := whoami(ctx, c, p)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("unmatched request: %v %v, want 200", resp, err)
		}
	})

	t.Run("reset", func(t *testing.T) {
		defer p.ClearFault()
		if err := p.SetFault(Fault{ResetProbability: 1}); err != nil {
			t.Fatal(err)
		}
		resets := p.Stats().Resets
		_, _, err := whoami(ctx, c, p)
		if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("got %v, want a connection reset", err)
		}
		if got := p.Stats().Resets; got < resets+1 {
			t.Errorf("Stats.Resets = %d, want > %d", got, resets)
		}
	})

	t.Run("stall until the client gives up", func(t *testing.T) {
		defer p.ClearFault()
		if err := p.SetFault(Fault{Stall: true}); err != nil {
			t.Fatal(err)
		}
		hits := up.hits.Load()
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		begin := time.Now()
		_, _, err := whoami(rctx, c, p)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want the client's deadline", err)
		}
		if d := time.Since(begin); d < 300*time.Millisecond {
			t.Errorf("gave up after %v, want >= 300ms", d)
		}
		waitStats(t, p, "stalled request ends", func(s ProxyStats) bool { return s.InFlight == 0 })
		if up.hits.Load() != hits {
			t.Error("a stalled request reached the upstream")
		}
	})

	t.Run("stall until cleared", func(t *testing.T) {
		if err := p.SetFault(Fault{Stall: true}); err != nil {
			t.Fatal(err)
		}
		stalled := p.Stats().Stalled
		res := make(chan error, 1)
		go func() {
			resp, _, err := whoami(ctx, c, p)
			if err == nil && resp.StatusCode != 200 {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
			res <- err
		}()
		waitStats(t, p, "request stalled", func(s ProxyStats) bool { return s.Stalled > stalled })
		select {
		case err := <-res:
			t.Fatalf("stalled request returned before the fault was cleared: %v", err)
		default:
		}
		p.ClearFault()
		if err := <-res; err != nil {
			t.Fatalf("after clearing the stall: %v", err)
		}
	})

	t.Run("streams and resets open connections", func(t *testing.T) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL()+"/stream", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		for i := range 3 { // lines arrive while the upstream handler still runs
			line, err := br.ReadString('\n')
			if err != nil || line != fmt.Sprintf("event %d\n", i) {
				t.Fatalf("line %d: %q %v", i, line, err)
			}
		}
		if n := p.ResetConnections(); n < 1 {
			t.Fatalf("ResetConnections() = %d, want >= 1", n)
		}
		if _, err := io.Copy(io.Discard, br); err == nil {
			t.Fatal("stream ended cleanly after its connection was reset, want an error")
		}
		waitStats(t, p, "stream handler ends", func(s ProxyStats) bool { return s.InFlight == 0 })
	})

	t.Run("invalid faults are rejected", func(t *testing.T) {
		for _, tc := range []struct {
			f     Fault
			field string
		}{
			{Fault{Latency: -1}, "Fault.Latency"},
			{Fault{ErrorProbability: 1.5}, "Fault.ErrorProbability"},
			{Fault{ResetProbability: -0.1}, "Fault.ResetProbability"},
			{Fault{ErrorCode: 404}, "Fault.ErrorCode"},
			{Fault{RetryAfter: -time.Second}, "Fault.RetryAfter"},
		} {
			if err := p.SetFault(tc.f); err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("SetFault(%+v) = %v, want an error naming %s", tc.f, err, tc.field)
			}
		}
	})
}

func TestFaultProxyCloseEndsStalledRequests(t *testing.T) {
	p, _, c := newProxyUnderTest(t)
	ctx := testContext(t, time.Minute)
	if err := p.SetFault(Fault{Stall: true}); err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		_, _, err := whoami(ctx, c, p)
		res <- err
	}()
	waitStats(t, p, "request stalled", func(s ProxyStats) bool { return s.Stalled == 1 })
	begin := time.Now()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("Close took %v", d)
	}
	if err := <-res; err == nil {
		t.Error("stalled request succeeded after Close, want an error")
	}
	if s := p.Stats(); s.InFlight != 0 || s.OpenConns != 0 {
		t.Errorf("after Close: %+v, want nothing in flight or open", s)
	}
	if _, _, err := whoami(ctx, c, p); err == nil {
		t.Error("request after Close succeeded")
	}
}

func TestFaultProxyRecordRequests(t *testing.T) {
	p, _, c := newProxyUnderTest(t)
	ctx := testContext(t, time.Minute)
	do := func(method, path string) (int, error) {
		req, _ := http.NewRequestWithContext(ctx, method, p.URL()+path, nil)
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, err
	}
	get := func(path string) (int, error) { return do(http.MethodGet, path) }
	before := time.Now()
	stop := p.RecordRequests(func(r *http.Request) bool { return r.URL.Path == "/whoami" })

	// Forwarded, then injected, then reset, then one not selected.
	if code, err := get("/whoami"); err != nil || code != 200 {
		t.Fatalf("forwarded: %d %v", code, err)
	}
	if err := p.SetFault(Fault{ErrorProbability: 1, ErrorCode: 429, RetryAfter: time.Second}); err != nil {
		t.Fatal(err)
	}
	if code, err := get("/whoami"); err != nil || code != 429 {
		t.Fatalf("injected: %d %v", code, err)
	}
	if err := p.SetFault(Fault{ResetProbability: 1}); err != nil {
		t.Fatal(err)
	}
	// A POST, which the client does not retry on a fresh connection.
	if _, err := do(http.MethodPost, "/whoami"); err == nil {
		t.Fatal("reset: got an answer, want a reset (recording must not break Hijack)")
	}
	p.ClearFault()
	if code, err := get("/write"); err != nil || code != 200 {
		t.Fatalf("not selected: %d %v", code, err)
	}
	waitStats(t, p, "every request ended", func(s ProxyStats) bool { return s.InFlight == 0 })
	events := stop()
	after := time.Now()
	if code, err := get("/whoami"); err != nil || code != 200 {
		t.Fatalf("after stop: %d %v", code, err)
	}
	if extra := stop(); len(extra) != 0 {
		t.Errorf("stop again: %d events, want none (nothing recorded after stop)", len(extra))
	}

	if len(events) != 3 {
		t.Fatalf("recorded %d events, want 3: %+v", len(events), events)
	}
	for i, want := range []struct {
		method             string
		code               int
		injected, answered bool
		forwarded          bool
	}{
		{http.MethodGet, 200, false, true, true},
		{http.MethodGet, 429, true, true, false},
		{http.MethodPost, 0, false, false, false},
	} {
		ev := events[i]
		if ev.Method != want.method || ev.Path != "/whoami" || ev.Code != want.code || ev.Injected != want.injected ||
			ev.Answered.IsZero() == want.answered || ev.Forwarded.IsZero() == want.forwarded {
			t.Errorf("event %d = %+v, want code %d injected %v answered %v forwarded %v", i, ev, want.code, want.injected, want.answered, want.forwarded)
		}
		if ev.Received.Before(before) || ev.Received.After(after) {
			t.Errorf("event %d received at %v, outside the run [%v, %v]", i, ev.Received, before, after)
		}
		if want.answered && ev.Answered.Before(ev.Received) {
			t.Errorf("event %d answered before it was received: %+v", i, ev)
		}
	}
	if events[1].Received.Before(events[0].Answered) {
		t.Errorf("events out of order: %+v", events)
	}
}

// HoldBody sends the headers at once and the body after the hold, to the
// upstream's handler, whether or not the client still waits; the answer
// reaches a client that does.
func TestFaultProxyHoldBody(t *testing.T) {
	p, up, c := newProxyUnderTest(t)
	ctx := context.Background()
	const hold = 400 * time.Millisecond
	if err := p.SetFault(Fault{HoldBody: hold, Match: func(r *http.Request) bool { return r.URL.Path == "/held" }}); err != nil {
		t.Fatal(err)
	}
	if err := p.SetFault(Fault{HoldBody: -time.Second}); err == nil {
		t.Error("a negative HoldBody was accepted")
	}
	for _, gone := range []bool{false, true} {
		t.Run(fmt.Sprintf("client gone during the hold: %v", gone), func(t *testing.T) {
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			req, _ := http.NewRequestWithContext(rctx, http.MethodPost, p.URL()+"/held", strings.NewReader("held-body"))
			sent := time.Now()
			answer := make(chan error, 1)
			go func() {
				resp, err := c.Do(req)
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if string(b) != "held write done" {
						err = fmt.Errorf("answer %q", b)
					}
				}
				answer <- err
			}()
			if gone {
				waitStats(t, p, "the request held", func(s ProxyStats) bool { return s.Delaying == 1 })
				cancel()
				if err := <-answer; !errors.Is(err, context.Canceled) {
					t.Errorf("client: %v, want its cancel", err)
				}
			}
			var h heldRequest
			select {
			case h = <-up.held:
			case <-time.After(10 * time.Second):
				t.Fatal("the held request never reached the upstream's handler")
			}
			if h.err != nil || h.body != "held-body" {
				t.Errorf("upstream read %q, %v; want held-body", h.body, h.err)
			}
			// The headers went at once (the handler started well before
			// the hold ended), the body after the hold.
			if h.headers.Sub(sent) >= hold || h.bodyAt.Sub(sent) < hold {
				t.Errorf("handler began %v and read the body %v after the request was sent; want < %v and >= %v",
					h.headers.Sub(sent), h.bodyAt.Sub(sent), hold, hold)
			}
			if !gone {
				if err := <-answer; err != nil {
					t.Errorf("client: %v", err)
				}
			}
			waitStats(t, p, "the held request ends", func(s ProxyStats) bool { return s.Delaying == 0 && s.InFlight == 0 })
		})
	}
	if s := p.Stats(); s.BodiesHeld != 2 {
		t.Errorf("Stats.BodiesHeld = %d, want 2", s.BodiesHeld)
	}
}
