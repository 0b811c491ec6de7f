package statuspatch_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/quietpatch/quietpatch/statuspatch"
)

// queueModel is the reference PatchQueue: slices and maps, no cleverness,
// written from the documented rules.
type queueModel struct {
	capacity int
	keyed    bool
	maxAge   time.Duration
	closed   bool
	waiting  []queueModelItem // FIFO
	inFlight map[string]int   // by key (keyless: by value, always 1)
	permits  []modelPermit    // by permit number
	spare    map[string]bool  // key keeps a slot for its replacers
	stats    statuspatch.QueueStats
}

// modelPermit is a permit: one that holds a slot, or a replacer granted by
// ReserveKey without one because an item of key was waiting.
type modelPermit struct {
	active, replacer bool
	key              string
}

type queueModelItem struct {
	key, value string
	enq        time.Time
}

// key of an item value "k<d>#<seq>".
func (m *queueModel) key(v string) string {
	if !m.keyed {
		return ""
	}
	return queueTestKey(v)
}

// flightKey is the key under which exclusivity applies; without a Key
// function every item stands alone.
func (m *queueModel) flightKey(it queueModelItem) string {
	if m.keyed {
		return it.key
	}
	return it.value
}

func (m *queueModel) coalesce(v string, now time.Time) bool {
	if !m.keyed {
		return false
	}
	k := m.key(v)
	for i := range m.waiting {
		if m.waiting[i].key == k {
			m.waiting[i].value, m.waiting[i].enq = v, now
			m.stats.Enqueued++
			m.stats.Superseded++
			return true
		}
	}
	return false
}

func (m *queueModel) full() bool { return len(m.waiting)+m.stats.Reserved >= m.capacity }

// replacers counts the active replacers of key k.
func (m *queueModel) replacers(k string) int {
	n := 0
	for _, p := range m.permits {
		if p.active && p.replacer && p.key == k {
			n++
		}
	}
	return n
}

// left records that the waiting item of key k left the queue: its slot is
// kept for the replacers counting on it.
func (m *queueModel) left(k string) {
	if m.keyed && m.replacers(k) > 0 && !m.spare[k] {
		m.spare[k] = true
		m.stats.Reserved++
	}
}

// settle gives a key's spare slot back once no replacer is left.
func (m *queueModel) settle(k string) {
	if m.replacers(k) == 0 && m.spare[k] {
		delete(m.spare, k)
		m.stats.Reserved--
	}
}

func (m *queueModel) waitingKey(k string) bool {
	for _, w := range m.waiting {
		if w.key == k {
			return true
		}
	}
	return false
}

func (m *queueModel) reserveKey(k string) (int, error) {
	if !m.keyed || m.closed || (!m.waitingKey(k) && !m.spare[k]) {
		return m.reserve()
	}
	m.permits = append(m.permits, modelPermit{active: true, replacer: true, key: k})
	return len(m.permits) - 1, nil
}

func (m *queueModel) push(v string, now time.Time) {
	m.waiting = append(m.waiting, queueModelItem{key: m.key(v), value: v, enq: now})
	m.stats.Enqueued++
}

func (m *queueModel) trySend(v string, now time.Time) error {
	switch {
	case m.closed:
		m.stats.DroppedClosed++
		return statuspatch.ErrClosed
	case m.coalesce(v, now):
		return nil
	case m.full():
		m.stats.DroppedFull++
		return statuspatch.ErrFull
	}
	m.push(v, now)
	return nil
}

// sendCancelled is Send with a context that is already done.
func (m *queueModel) sendCancelled(v string, now time.Time) error {
	err := m.trySend(v, now)
	if errors.Is(err, statuspatch.ErrFull) {
		return context.Canceled
	}
	return err
}

func (m *queueModel) reserve() (int, error) {
	switch {
	case m.closed:
		m.stats.DroppedClosed++
		return -1, statuspatch.ErrClosed
	case m.full():
		m.stats.DroppedFull++
		return -1, statuspatch.ErrFull
	}
	m.permits = append(m.permits, modelPermit{active: true})
	m.stats.Reserved++
	return len(m.permits) - 1, nil
}

// take ends permit p, reporting whether it was active.
func (m *queueModel) take(p int) bool {
	if p < 0 || !m.permits[p].active {
		return false
	}
	m.permits[p].active = false
	if !m.permits[p].replacer {
		m.stats.Reserved--
	}
	return true
}

func (m *queueModel) release(p int) {
	if m.take(p) && m.permits[p].replacer {
		m.settle(m.permits[p].key)
	}
}

func (m *queueModel) permitSend(p int, v string, now time.Time) error {
	if !m.take(p) {
		return statuspatch.ErrInvalidPermit
	}
	mp := m.permits[p]
	if mp.replacer {
		defer m.settle(mp.key)
	}
	switch {
	case m.closed:
		m.stats.DroppedClosed++
		return statuspatch.ErrClosed
	case m.coalesce(v, now):
		return nil
	case mp.replacer && m.key(v) == mp.key && m.spare[mp.key]:
		delete(m.spare, mp.key)
		m.stats.Reserved--
	case mp.replacer && m.full():
		m.stats.DroppedFull++
		return statuspatch.ErrFull
	}
	m.push(v, now)
	return nil
}

// receive delivers like the queue: if any item is eligible, scan from the
// head, expiring what is too old, skipping keys in flight, up to the first
// eligible item.
func (m *queueModel) receive(now time.Time) (queueModelItem, bool) {
	eligible := 0
	for _, w := range m.waiting {
		if m.inFlight[m.flightKey(w)] == 0 {
			eligible++
		}
	}
	if eligible == 0 {
		return queueModelItem{}, false
	}
	for i := 0; i < len(m.waiting); i++ {
		w := m.waiting[i]
		if m.maxAge > 0 && now.Sub(w.enq) > m.maxAge {
			m.waiting = append(m.waiting[:i:i], m.waiting[i+1:]...)
			m.stats.DroppedExpired++
			m.left(w.key)
			i--
			continue
		}
		if m.inFlight[m.flightKey(w)] > 0 {
			continue
		}
		m.waiting = append(m.waiting[:i:i], m.waiting[i+1:]...)
		m.left(w.key)
		m.inFlight[m.flightKey(w)]++
		m.stats.Dequeued++
		m.stats.InFlight++
		return w, true
	}
	return queueModelItem{}, false
}

func (m *queueModel) drained() bool { return m.closed && len(m.waiting) == 0 }

// queueFuzzDelivery is an item the queue delivered, with what the model
// expected.
type queueFuzzDelivery struct {
	it   statuspatch.Item[string]
	want queueModelItem
	done bool
}

// FuzzQueueModel runs random single-goroutine sequences of every PatchQueue
// operation against queueModel and checks, after every step: same results,
// same counters, capacity never exceeded, and enqueued = dequeued +
// superseded + expired + depth. At the end, the OpenTelemetry instruments
// must report the same counters. Run with go test -fuzz FuzzQueueModel.
//
// Input: byte 0 is the configuration (capacity 1..8 in the low 3 bits,
// bit 3 keyless, bits 4-5 MaxAge in {0, 0, 2s, 5s}); then each step is an op
// byte followed by an argument byte. Ops 10 and 11 exercise ReserveKey: a
// permit granted at capacity for a key that waits must replace it, also
// when a consumer took the waiting item in between.
func FuzzQueueModel(f *testing.F) {
	for _, seed := range []string{
		"\x03" + "\x00\x00\x00\x01\x00\x02\x04\x00\x04\x00\x04\x00",
		"\x01" + "\x00\x00\x00\x00\x09\x01\x01\x00\x02\x00\x05\x00\x06\x00",
		"\x22" + "\x00\x00\x08\x01\x00\x01\x08\x01\x04\x00\x08\x03\x04\x00",
		"\x0a" + "\x00\x00\x00\x00\x04\x00\x06\x00\x06\x00\x07\x00\x04\x00\x05\x00",
		"\x17" + "\x01\x00\x01\x00\x02\x01\x03\x00\x02\x00\x07\x00\x02\x01\x04\x00\x04\x00",
		// Capacity 1, keyed: k1 waits, queue full; ReserveKey(k1) is
		// granted; the waiting item is taken; the permit's Send still
		// enqueues (the slot was kept), then a second replacer coalesces.
		"\x00" + "\x00\x01\x0a\x01\x0a\x01\x04\x00\x0b\x00\x0b\x04\x04\x00\x06\x00",
		// Capacity 2: ReserveKey for a key not waiting takes a slot;
		// at capacity it is refused; release then reserve again.
		"\x01" + "\x0a\x02\x0a\x03\x0a\x01\x03\x00\x0a\x01\x0b\x04",
		// MaxAge 2s: the waiting item expires under a replacer.
		"\x20" + "\x00\x01\x0a\x01\x08\x03\x04\x00\x0b\x00\x04\x00",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		cfgByte := data[0]
		data = data[1:]
		capacity := int(cfgByte&7) + 1
		keyed := cfgByte&8 == 0
		maxAge := [...]time.Duration{0, 0, 2 * time.Second, 5 * time.Second}[(cfgByte>>4)&3]

		clk := testingclock.NewFakePassiveClock(queueT0)
		reader := sdkmetric.NewManualReader()
		provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		defer func() { _ = provider.Shutdown(context.Background()) }()
		cfg := statuspatch.QueueConfig[string]{
			Capacity: capacity, MaxAge: maxAge, Clock: clk, Name: "fuzz",
			Meter: provider.Meter("fuzz"),
		}
		if keyed {
			cfg.Key = queueTestKey
		}
		q, err := statuspatch.NewPatchQueue(cfg)
		if err != nil {
			t.Fatal(err)
		}
		m := &queueModel{capacity: capacity, keyed: keyed, maxAge: maxAge, inFlight: map[string]int{}, spare: map[string]bool{}}
		var permits []statuspatch.Permit[string]
		var delivered []queueFuzzDelivery
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		seq := 0
		next := func(arg byte) string {
			seq++
			return "k" + strconv.Itoa(int(arg%4)) + "#" + strconv.Itoa(seq)
		}
		check := func(step int, what string, got, want error) {
			t.Helper()
			if !errors.Is(got, want) || (got == nil) != (want == nil) {
				t.Fatalf("step %d %s: error %v, model %v", step, what, got, want)
			}
		}
		checkDelivery := func(step int, what string, it statuspatch.Item[string], ok bool, want queueModelItem, wantOK bool) {
			t.Helper()
			if ok != wantOK {
				t.Fatalf("step %d %s: delivered %v (%q), model %v (%q)", step, what, ok, it.Value, wantOK, want.value)
			}
			if !ok {
				return
			}
			if it.Value != want.value || it.Key() != want.key || !it.Enqueued.Equal(want.enq) {
				t.Fatalf("step %d %s: delivered %q key %q at %v, model %q key %q at %v",
					step, what, it.Value, it.Key(), it.Enqueued, want.value, want.key, want.enq)
			}
			delivered = append(delivered, queueFuzzDelivery{it: it, want: want})
		}
		for step := 0; len(data) >= 2; step++ {
			op, arg := data[0]%12, data[1]
			data = data[2:]
			now := clk.Now()
			var what string
			switch op {
			case 0:
				v := next(arg)
				what = "TrySend " + v
				check(step, what, q.TrySend(v), m.trySend(v, now))
			case 1:
				what = "Reserve"
				p, err := q.Reserve()
				mp, merr := m.reserve()
				check(step, what, err, merr)
				if merr == nil {
					if mp != len(permits) {
						t.Fatalf("step %d: model permit %d, have %d", step, mp, len(permits))
					}
					permits = append(permits, p)
				}
			case 2, 3:
				// A permit by number; one past the end is the zero Permit.
				i := int(arg>>2) % (len(permits) + 1)
				var p statuspatch.Permit[string]
				mi := -1
				if i < len(permits) {
					p, mi = permits[i], i
				}
				if op == 2 {
					v := next(arg)
					what = fmt.Sprintf("permit %d Send %s", mi, v)
					check(step, what, p.Send(v), m.permitSend(mi, v, now))
				} else {
					what = fmt.Sprintf("permit %d Release", mi)
					p.Release()
					m.release(mi)
				}
			case 4:
				what = "TryReceive"
				it, ok, err := q.TryReceive()
				want, wantOK := m.receive(now)
				var merr error
				if !wantOK && m.drained() {
					merr = statuspatch.ErrClosed
				}
				check(step, what, err, merr)
				checkDelivery(step, what, it, ok, want, wantOK)
			case 5:
				what = "Receive(cancelled)"
				it, err := q.Receive(cancelled)
				want, wantOK := m.receive(now)
				var merr error
				switch {
				case wantOK:
				case m.drained():
					merr = statuspatch.ErrClosed
				default:
					merr = context.Canceled
				}
				check(step, what, err, merr)
				checkDelivery(step, what, it, err == nil, want, wantOK)
			case 6:
				if len(delivered) == 0 {
					what = "Done(zero)"
					q.Done(statuspatch.Item[string]{})
					break
				}
				d := &delivered[int(arg)%len(delivered)]
				what = "Done " + d.want.value
				q.Done(d.it)
				if !d.done {
					d.done = true
					m.inFlight[m.flightKey(d.want)]--
					m.stats.InFlight--
				}
			case 7:
				if arg >= 64 { // keep Close rare
					continue
				}
				what = "Close"
				q.Close()
				m.closed = true
			case 8:
				d := time.Duration(arg%4) * time.Second
				what = "tick " + d.String()
				clk.SetTime(now.Add(d))
			case 9:
				v := next(arg)
				what = "Send(cancelled) " + v
				check(step, what, q.Send(cancelled, v), m.sendCancelled(v, now))
			case 10:
				k := "k" + strconv.Itoa(int(arg%4))
				what = "ReserveKey " + k
				p, err := q.ReserveKey(k)
				mp, merr := m.reserveKey(k)
				check(step, what, err, merr)
				if merr == nil {
					if mp != len(permits) {
						t.Fatalf("step %d: model permit %d, have %d", step, mp, len(permits))
					}
					permits = append(permits, p)
				}
			case 11:
				// Send through a permit with the key it was reserved
				// for (a fresh key for Reserve's permits).
				i := int(arg>>2) % (len(permits) + 1)
				var p statuspatch.Permit[string]
				mi := -1
				k := "k" + strconv.Itoa(int(arg%4))
				if i < len(permits) {
					p, mi = permits[i], i
					if m.permits[i].replacer {
						k = m.permits[i].key
					}
				}
				seq++
				v := k + "#" + strconv.Itoa(seq)
				what = fmt.Sprintf("permit %d Send %s", mi, v)
				check(step, what, p.Send(v), m.permitSend(mi, v, now))
			}
			m.stats.Depth = len(m.waiting)
			st := q.Stats()
			if d := cmp.Diff(m.stats, st); d != "" {
				t.Fatalf("step %d %s: Stats (-model +queue):\n%s", step, what, d)
			}
			if st.Depth+st.Reserved > capacity {
				t.Fatalf("step %d %s: %d waiting + %d reserved > capacity %d", step, what, st.Depth, st.Reserved, capacity)
			}
			if st.Enqueued != st.Dequeued+st.Superseded+st.DroppedExpired+int64(st.Depth) {
				t.Fatalf("step %d %s: enqueued %d != dequeued %d + superseded %d + expired %d + depth %d",
					step, what, st.Enqueued, st.Dequeued, st.Superseded, st.DroppedExpired, st.Depth)
			}
			if q.Len() != st.Depth || q.InFlight() != st.InFlight {
				t.Fatalf("step %d %s: Len %d InFlight %d disagree with Stats %+v", step, what, q.Len(), q.InFlight(), st)
			}
		}
		// The instruments report what the counters say.
		got := queueCollect(t, reader)
		st := m.stats
		want := map[string]float64{
			"quietpatch.queue.enqueued{pipeline=fuzz}":                st2f(st.Enqueued),
			"quietpatch.queue.dequeued{pipeline=fuzz}":                st2f(st.Dequeued),
			"quietpatch.queue.superseded{pipeline=fuzz}":              st2f(st.Superseded),
			"quietpatch.queue.dropped{pipeline=fuzz,reason=full}":     st2f(st.DroppedFull),
			"quietpatch.queue.dropped{pipeline=fuzz,reason=closed}":   st2f(st.DroppedClosed),
			"quietpatch.queue.dropped{pipeline=fuzz,reason=expired}":  st2f(st.DroppedExpired),
			"quietpatch.queue.depth{pipeline=fuzz}":                   float64(st.Depth),
			"quietpatch.queue.capacity{pipeline=fuzz}":                float64(capacity),
			"quietpatch.queue.depth.peak_ewma{pipeline=fuzz}#present": 1,
		}
		// Observable instruments report every counter, zeros included.
		if _, ok := got["quietpatch.queue.depth.peak_ewma{pipeline=fuzz}"]; ok {
			got["quietpatch.queue.depth.peak_ewma{pipeline=fuzz}#present"] = 1
			delete(got, "quietpatch.queue.depth.peak_ewma{pipeline=fuzz}")
		}
		if m.closed { // Close unregisters the instruments.
			clear(want)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Fatalf("instruments (-want +got):\n%s", d)
		}
		q.Close()
	})
}

func st2f(n int64) float64 { return float64(n) }
