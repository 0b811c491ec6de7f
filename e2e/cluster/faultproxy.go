package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
)

// Fault describes how a FaultProxy misbehaves. The zero value forwards every
// request unchanged. For each request that Match selects, in this order:
//
//  1. Stall: the request waits (nothing is sent upstream) until the fault
//     is changed, the client gives up, or the proxy closes; then it is
//     handled by whatever fault is in force by then.
//  2. Latency: the request waits this long before going on. If the client
//     gives up meanwhile, nothing is sent upstream — unless Detach is set,
//     in which case the request goes on without its client (see Detach).
//  3. With probability ResetProbability the client's connection is reset
//     (TCP RST, no response).
//  4. With probability ErrorProbability the proxy answers ErrorCode itself,
//     as the API server would: a 429 exactly as its Priority and Fairness
//     (and max-in-flight) filter rejects a request — text/plain "Too many
//     requests, please try again later." —, a 5xx with a Kubernetes Status
//     body; with a Retry-After header if RetryAfter is set, which a Status
//     body then also carries in details.retryAfterSeconds, as the API
//     server's own errors do. client-go turns either into an error whose
//     apierrors.SuggestsClientDelay is the Retry-After (from the header for
//     a text answer, from the body's details for a Status). Note that
//     client-go retries 429 and 5xx answers that carry Retry-After (up to
//     10 times) unless the request says not to, and does not retry those
//     without it.
//  5. Otherwise the request is forwarded — with HoldBody set, its headers
//     at once and its body HoldBody later (see HoldBody).
//
// A new fault applies to requests that arrive (or are stalled) after it is
// set; a watch already streaming is not affected (see ResetConnections).
type Fault struct {
	// Match selects the requests the fault applies to; nil selects all.
	// It must not read the body.
	Match func(*http.Request) bool
	// Latency added before forwarding. Must be >= 0.
	Latency time.Duration
	// Stall holds requests until the fault changes or the client gives up.
	Stall bool
	// Detach, with Latency > 0, holds each request for Latency and then
	// forwards it whether or not its client is still waiting: a client
	// that cancels, times out or closes its connection meanwhile does not
	// stop it, and the API server's answer is then thrown away. The proxy
	// reads the request body before it waits, so it has the whole request
	// to send. This is what a real client meets when it cancels a write
	// that is already on its way to the API server and etcd: the cancel
	// does not undo the write, which may land after the client gave up —
	// after, say, the client's replica vacated its Lease. Only Close ends
	// a detached request early (nothing is sent then). Without Detach, a
	// client that gives up during Latency ends the request and nothing is
	// sent upstream.
	Detach bool
	// ErrorProbability in [0, 1] of answering ErrorCode instead of forwarding.
	ErrorProbability float64
	// ErrorCode is the status injected errors carry: 429 or 500–599.
	// Default 503.
	ErrorCode int
	// RetryAfter, if > 0, sets Retry-After on injected errors, in whole
	// seconds rounded up.
	RetryAfter time.Duration
	// ResetProbability in [0, 1] of resetting the client's connection.
	ResetProbability float64
	// HoldBody, if > 0, forwards a request's headers upstream at once and
	// its body HoldBody later, streamed through a pipe: the API server
	// has received the request — its request deadline counts from then
	// (the timeout parameter, or its default) — but cannot read the body
	// until HoldBody has passed, as when the client was paused between
	// sending the two (SIGSTOP, CFS throttling, a long GC). Like Detach,
	// the request goes on whether or not its client still waits: a paused
	// client's cancel would not reach the server either. Only Close ends
	// it early. The upstream's answer reaches the client if it still
	// waits. The proxy reads the client's body before it forwards.
	HoldBody time.Duration
}

func (f Fault) validate() error {
	switch {
	case f.Latency < 0:
		return fmt.Errorf("cluster: Fault.Latency must be >= 0, got %v", f.Latency)
	case f.ErrorProbability < 0 || f.ErrorProbability > 1:
		return fmt.Errorf("cluster: Fault.ErrorProbability must be in [0, 1], got %v", f.ErrorProbability)
	case f.ResetProbability < 0 || f.ResetProbability > 1:
		return fmt.Errorf("cluster: Fault.ResetProbability must be in [0, 1], got %v", f.ResetProbability)
	case f.ErrorCode != 0 && f.ErrorCode != http.StatusTooManyRequests && (f.ErrorCode < 500 || f.ErrorCode > 599):
		return fmt.Errorf("cluster: Fault.ErrorCode must be 0, 429 or 500-599, got %d", f.ErrorCode)
	case f.RetryAfter < 0:
		return fmt.Errorf("cluster: Fault.RetryAfter must be >= 0, got %v", f.RetryAfter)
	case f.HoldBody < 0:
		return fmt.Errorf("cluster: Fault.HoldBody must be >= 0, got %v", f.HoldBody)
	}
	return nil
}

// ProxyStats counts what a FaultProxy did. Counters only grow; InFlight and
// OpenConns are current values.
type ProxyStats struct {
	Requests       int64 // requests received
	Forwarded      int64 // requests sent upstream
	UpstreamErrors int64 // forwarded requests that failed upstream (answered 502 if the client still waited)
	Delayed        int64 // requests that waited Fault.Latency
	Stalled        int64 // requests that were stalled
	Errors         int64 // injected error answers
	Resets         int64 // connections reset by a fault or ResetConnections
	Detached       int64 // requests forwarded upstream after their client had gone (Fault.Detach)
	BodiesHeld     int64 // requests forwarded with their body held (Fault.HoldBody)
	Delaying       int64 // requests held by Stall or Latency now, or forwarded after that and not yet answered
	InFlight       int64 // requests being handled now (watches included)
	OpenConns      int64 // client connections open now
}

// FaultProxy is a reverse proxy on 127.0.0.1 in front of the API server that
// injects faults (see Fault) while it runs. It serves HTTPS (HTTP/1.1, with
// a certificate from the control plane's CA for 127.0.0.1) and connects
// upstream over TLS trusting that CA, with no client certificate: the
// client's Authorization header is forwarded, so bearer-token identities
// (ControlPlane.ConfigFor) keep their identity through it, while a
// client-certificate identity (the admin) arrives as anonymous. Responses
// are flushed as they arrive, so watches stream through it.
//
// Create one with ControlPlane.NewFaultProxy; ControlPlane.Stop closes it.
// Its methods are safe for concurrent use.
type FaultProxy struct {
	cp       *ControlPlane
	ln       net.Listener
	srv      *http.Server
	rp       *httputil.ReverseProxy
	upstream *http.Transport
	url      string

	ctx    context.Context // cancelled by Close: ends stalls, streams, upstream requests
	cancel context.CancelFunc

	mu       sync.Mutex
	fault    Fault
	changed  chan struct{} // closed and replaced whenever the fault changes
	closed   bool
	conns    map[net.Conn]struct{}
	handlers sync.WaitGroup // Add only under mu while !closed

	serveDone chan struct{}

	rec atomic.Pointer[recording] // nil unless RecordRequests is recording

	requests, forwarded, upstreamErrors, delayed, stalled, injected, resets, inFlight, detached, delaying, bodiesHeld atomic.Int64
}

// NewFaultProxy starts a FaultProxy in front of the API server, with no
// fault set. It follows API server restarts (same port).
func (cp *ControlPlane) NewFaultProxy() (*FaultProxy, error) {
	cp.mu.Lock()
	stopped := cp.stopped
	cp.mu.Unlock()
	if stopped {
		return nil, ErrStopped
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.pki.caPEM)
	target, err := url.Parse(cp.Host())
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("cluster: fault proxy listen: %w", err)
	}
	p := &FaultProxy{
		cp:        cp,
		url:       "https://" + ln.Addr().String(),
		changed:   make(chan struct{}),
		conns:     map[net.Conn]struct{}{},
		serveDone: make(chan struct{}),
		upstream: &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			ForceAttemptHTTP2:   true,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     30 * time.Second,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		},
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
		},
		Transport:     p.upstream,
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0),
		ErrorHandler:  p.upstreamError,
	}
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
		ConnState:         p.connState,
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){}, // HTTP/1.1 only: connections can be hijacked and reset
		BaseContext:       func(net.Listener) context.Context { return p.ctx },
	}
	p.ln = tls.NewListener(ln, &tls.Config{
		Certificates: []tls.Certificate{cp.pki.servingCert},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	go func() {
		defer close(p.serveDone)
		_ = p.srv.Serve(p.ln)
	}()

	cp.mu.Lock()
	if cp.stopped {
		cp.mu.Unlock()
		p.Close()
		return nil, ErrStopped
	}
	cp.proxies[p] = struct{}{}
	cp.mu.Unlock()
	return p, nil
}

// URL is the proxy's address, https://127.0.0.1:PORT.
func (p *FaultProxy) URL() string { return p.url }

// Config returns a copy of base that talks to the API server through the
// proxy: Host is the proxy, TLS trusts the control plane's CA, and client
// certificates are removed (the proxy would not forward them). Use it with a
// bearer-token config from ControlPlane.ConfigFor.
func (p *FaultProxy) Config(base *rest.Config) *rest.Config {
	c := rest.CopyConfig(base)
	c.Host = p.url
	c.TLSClientConfig = rest.TLSClientConfig{CAData: p.cp.pki.caPEM}
	return c
}

// ConfigFor is ControlPlane.ConfigFor through the proxy.
func (p *FaultProxy) ConfigFor(ctx context.Context, namespace, serviceAccount string) (*rest.Config, error) {
	c, err := p.cp.ConfigFor(ctx, namespace, serviceAccount)
	if err != nil {
		return nil, err
	}
	return p.Config(c), nil
}

// SetFault replaces the fault in force; stalled requests re-evaluate at once.
// An invalid fault is rejected with an error naming the field, and the
// previous one stays.
func (p *FaultProxy) SetFault(f Fault) error {
	if err := f.validate(); err != nil {
		return err
	}
	if f.ErrorCode == 0 {
		f.ErrorCode = http.StatusServiceUnavailable
	}
	p.mu.Lock()
	p.fault = f
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	return nil
}

// ClearFault sets the zero Fault: everything is forwarded again, and stalled
// requests go on.
func (p *FaultProxy) ClearFault() { _ = p.SetFault(Fault{}) }

// Stats returns the counters.
func (p *FaultProxy) Stats() ProxyStats {
	p.mu.Lock()
	open := int64(len(p.conns))
	p.mu.Unlock()
	return ProxyStats{
		Requests:       p.requests.Load(),
		Forwarded:      p.forwarded.Load(),
		UpstreamErrors: p.upstreamErrors.Load(),
		Delayed:        p.delayed.Load(),
		Stalled:        p.stalled.Load(),
		Errors:         p.injected.Load(),
		Resets:         p.resets.Load(),
		Detached:       p.detached.Load(),
		BodiesHeld:     p.bodiesHeld.Load(),
		Delaying:       p.delaying.Load(),
		InFlight:       p.inFlight.Load(),
		OpenConns:      open,
	}
}

// ProxyEvent is one request a FaultProxy handled while it was recording
// (RecordRequests). Times are the proxy's wall clock (time.Now, with its
// monotonic reading), taken in the proxy's handler: Received as it starts
// handling the request, once the request line and headers were read;
// Answered once the answer's last byte was handed to the connection, before
// the handler returns. A client on loopback sent the request a little before
// Received and reads the answer a little after Answered: tens of
// microseconds on an idle machine, milliseconds when the CPU is contended.
type ProxyEvent struct {
	// Method and Path of the request (Path without the query).
	Method, Path string
	// Received is when the proxy began handling the request.
	Received time.Time
	// Forwarded is when the request was sent upstream, after any Stall or
	// Latency; zero if it was not (an injected answer, a reset, a client
	// that gave up).
	Forwarded time.Time
	// Answered is when the proxy finished answering; zero if it did not
	// answer (a reset, a client that gave up, the proxy closing).
	Answered time.Time
	// Code is the status code of the answer, 0 if none.
	Code int
	// Injected reports an answer the proxy made itself (Fault's
	// ErrorProbability), which never reached the API server.
	Injected bool
	// BodyHeld is Fault.HoldBody when it applied: the body went upstream
	// that long after Forwarded (the headers).
	BodyHeld time.Duration
}

// recording is what RecordRequests collects.
type recording struct {
	match  func(*http.Request) bool
	mu     sync.Mutex
	events []ProxyEvent
}

// RecordRequests starts recording every request that match selects (nil:
// all), whatever fault is in force, and returns the function that stops the
// recording and returns the events in the order the requests ended. A
// second RecordRequests replaces the first, whose stop function then returns
// what it collected until then. Events are kept in memory until stop:
// record a bounded run.
func (p *FaultProxy) RecordRequests(match func(*http.Request) bool) (stop func() []ProxyEvent) {
	r := &recording{match: match}
	p.rec.Store(r)
	return func() []ProxyEvent {
		p.rec.CompareAndSwap(r, nil)
		r.mu.Lock()
		defer r.mu.Unlock()
		out := r.events
		r.events = nil
		return out
	}
}

// recordStart returns the event of a request being recorded, or nil.
func (p *FaultProxy) recordStart(r *http.Request) (*recording, *ProxyEvent) {
	rec := p.rec.Load()
	if rec == nil || (rec.match != nil && !rec.match(r)) {
		return nil, nil
	}
	return rec, &ProxyEvent{Method: r.Method, Path: r.URL.Path, Received: time.Now()}
}

func (rec *recording) add(ev *ProxyEvent) {
	rec.mu.Lock()
	rec.events = append(rec.events, *ev)
	rec.mu.Unlock()
}

// codeWriter remembers the status code written through it.
type codeWriter struct {
	http.ResponseWriter
	code int
}

func (w *codeWriter) WriteHeader(code int) {
	if w.code == 0 && code >= 200 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *codeWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController (which the reverse proxy flushes
// through) reach the connection's writer.
func (w *codeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ResetConnections resets (TCP RST) every client connection open now,
// including those carrying watches, and returns how many it reset.
func (p *FaultProxy) ResetConnections() int {
	p.mu.Lock()
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		resetConn(c)
	}
	p.resets.Add(int64(len(conns)))
	return len(conns)
}

// Close stops the proxy: no new connections, stalled and streaming requests
// end, open connections are closed; it waits (up to 10 s) for every handler
// to return. Idempotent.
func (p *FaultProxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()

	p.cancel()
	err := p.srv.Close()
	<-p.serveDone
	done := make(chan struct{})
	go func() {
		p.handlers.Wait()
		close(done)
	}()
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		err = errors.Join(err, fmt.Errorf("cluster: fault proxy %s: %d handlers still running after 10s", p.url, p.inFlight.Load()))
	}
	p.upstream.CloseIdleConnections()
	p.mu.Lock()
	clear(p.conns) // closed by srv.Close; their StateClosed may come later
	p.mu.Unlock()

	p.cp.mu.Lock()
	delete(p.cp.proxies, p)
	p.cp.mu.Unlock()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

func (p *FaultProxy) connState(c net.Conn, s http.ConnState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch s {
	case http.StateNew:
		p.conns[c] = struct{}{}
	case http.StateHijacked, http.StateClosed:
		delete(p.conns, c)
	}
}

func (p *FaultProxy) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.handlers.Add(1)
	return true
}

func (p *FaultProxy) current() (Fault, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fault, p.changed
}

// ServeHTTP applies the fault in force and forwards the request. It is the
// proxy's handler; it is exported only to satisfy http.Handler.
func (p *FaultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.enter() {
		panic(http.ErrAbortHandler)
	}
	defer p.handlers.Done()
	p.requests.Add(1)
	p.inFlight.Add(1)
	defer p.inFlight.Add(-1)

	// r.Context() derives from p.ctx (the server's BaseContext): it ends
	// when the client goes away or the proxy closes.
	ctx := r.Context()

	rec, ev := p.recordStart(r)
	if ev != nil {
		cw := &codeWriter{ResponseWriter: w}
		w = cw
		defer func() {
			// Also on the panics that abort a request: no answer then.
			if cw.code != 0 {
				ev.Code, ev.Answered = cw.code, time.Now()
			}
			rec.add(ev)
		}()
	}

	var f Fault
	buffered, held := false, false
	hold := func() { // counts the request in Delaying once, until it ends
		if !held {
			held = true
			p.delaying.Add(1)
		}
	}
	defer func() {
		if held {
			p.delaying.Add(-1)
		}
	}()
	for counted := false; ; {
		var changed <-chan struct{}
		f, changed = p.current()
		if f.Match != nil && !f.Match(r) {
			f = Fault{}
		}
		if (f.Stall || f.Latency > 0) && !buffered {
			r = bufferBody(r)
			buffered = true
		}
		if !f.Stall {
			break
		}
		if !counted {
			p.stalled.Add(1)
			hold()
			counted = true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			// The client gave up or the proxy closed: no answer at all
			// (returning would send an empty 200).
			panic(http.ErrAbortHandler)
		}
	}
	if f.Latency > 0 {
		p.delayed.Add(1)
		hold()
		wait := ctx
		if f.Detach {
			r = r.Clone(p.ctx) // the body is buffered; only Close ends it now
			wait = p.ctx
		}
		t := time.NewTimer(f.Latency)
		select {
		case <-t.C:
		case <-wait.Done():
			t.Stop()
			panic(http.ErrAbortHandler)
		}
		if f.Detach && ctx.Err() != nil {
			p.detached.Add(1) // forwarded below although nobody waits
		}
	}
	if f.ResetProbability > 0 && rand.Float64() < f.ResetProbability {
		p.resets.Add(1)
		// Through the ResponseController: w may be RecordRequests' wrapper.
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		resetConn(conn)
		return
	}
	if f.ErrorProbability > 0 && rand.Float64() < f.ErrorProbability {
		p.injected.Add(1)
		var secs int64
		if f.RetryAfter > 0 {
			secs = int64((f.RetryAfter + time.Second - 1) / time.Second)
			w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		}
		if ev != nil {
			ev.Injected = true
		}
		if f.ErrorCode == http.StatusTooManyRequests {
			// What the API server's tooManyRequests writes.
			http.Error(w, "Too many requests, please try again later.", http.StatusTooManyRequests)
			return
		}
		writeStatus(w, f.ErrorCode, secs, "injected by the quietpatch e2e fault proxy")
		return
	}
	p.forwarded.Add(1)
	if f.HoldBody > 0 && r.Body != nil && r.Body != http.NoBody {
		hold()
		r = p.holdBody(r, f.HoldBody)
		if ev != nil {
			ev.BodyHeld = f.HoldBody
		}
	}
	if ev != nil {
		ev.Forwarded = time.Now()
	}
	p.rp.ServeHTTP(w, r)
}

// holdBody reads r's body and returns a copy of r, detached from its
// client (only Close ends it), whose body a goroutine writes into a pipe
// hold from now. The caller is a handler: the goroutine is counted with
// the handlers, and ends at hold or Close at the latest.
func (p *FaultProxy) holdBody(r *http.Request, hold time.Duration) *http.Request {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = r.Body.Close()
	pr, pw := io.Pipe()
	out := r.Clone(p.ctx)
	out.Body, out.GetBody, out.ContentLength = pr, nil, int64(len(body))
	p.bodiesHeld.Add(1)
	p.handlers.Add(1) // the handler is counted: allowed at any time
	go func() {
		defer p.handlers.Done()
		t := time.NewTimer(hold)
		defer t.Stop()
		select {
		case <-t.C:
			_, err := pw.Write(body) // io.ErrClosedPipe once the upstream stopped reading
			_ = pw.CloseWithError(err)
		case <-p.ctx.Done():
			_ = pw.CloseWithError(p.ctx.Err())
		}
	}()
	return out
}

// bufferBody reads r's body into memory and returns r with that body, or
// aborts the request if the body cannot be read. A request that a fault
// holds needs it twice over: the server notices that the client has gone
// only once the handler has read the body to its end (until then a
// cancelled request would still be forwarded, from what the connection had
// buffered), and a detached request must carry its body after the client
// has gone.
func bufferBody(r *http.Request) *http.Request {
	if r.Body == nil || r.Body == http.NoBody {
		return r
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	r.ContentLength = int64(len(body))
	return r
}

func (p *FaultProxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	p.upstreamErrors.Add(1)
	if r.Context().Err() != nil {
		return // nobody is waiting for an answer
	}
	writeStatus(w, http.StatusBadGateway, 0, "fault proxy: upstream: "+err.Error())
}

// writeStatus answers with a Kubernetes Status object, as the API server
// would; retryAfter > 0 goes into details.retryAfterSeconds.
func writeStatus(w http.ResponseWriter, code int, retryAfter int64, msg string) {
	reason := map[int]string{
		http.StatusTooManyRequests:     "TooManyRequests",
		http.StatusServiceUnavailable:  "ServiceUnavailable",
		http.StatusGatewayTimeout:      "Timeout",
		http.StatusInternalServerError: "InternalError",
	}[code]
	if reason == "" {
		reason = "InternalError"
	}
	details := ""
	if retryAfter > 0 {
		details = fmt.Sprintf(`,"details":{"retryAfterSeconds":%d}`, retryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":%q,"reason":%q%s,"code":%d}`+"\n", msg, reason, details, code)
}

// resetConn closes c so that the peer sees a TCP reset rather than an
// orderly close.
func resetConn(c net.Conn) {
	nc := c
	if tc, ok := c.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	if tcp, ok := nc.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = nc.Close()
}
