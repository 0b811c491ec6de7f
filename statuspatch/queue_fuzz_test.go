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
	permits  []bool           // active, by permit number
	stats    statuspatch.QueueStats
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
	m.permits = append(m.permits, true)
	m.stats.Reserved++
	return len(m.permits) - 1, nil
}

func (m *queueModel) take(p int) bool {
	if p < 0 || !m.permits[p] {
		return false
	}
	m.permits[p] = false
	m.stats.Reserved--
	return true
}

func (m *queueModel) permitSend(p int, v string, now time.Time) error {
	switch {
	case !m.take(p):
		return statuspatch.ErrInvalidPermit
	case m.closed:
		m.stats.DroppedClosed++
		return statuspatch.ErrClosed
	case m.coalesce(v, now):
		return nil
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
			i--
			continue
		}
		if m.inFlight[m.flightKey(w)] > 0 {
			continue
		}
		m.waiting = append(m.waiting[:i:i], m.waiting[i+1:]...)
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
// byte followed by an argument byte.
func FuzzQueueModel(f *testing.F) {
	for _, seed := range []string{
		"\x03" + "\x00\x00\x00\x01\x00\x02\x04\x00\x04\x00\x04\x00",
		"\x01" + "\x00\x00\x00\x00\x09\x01\x01\x00\x02\x00\x05\x00\x06\x00",
		"\x22" + "\x00\x00\x08\x01\x00\x01\x08\x01\x04\x00\x08\x03\x04\x00",
		"\x0a" + "\x00\x00\x00\x00\x04\x00\x06\x00\x06\x00\x07\x00\x04\x00\x05\x00",
		"\x17" + "\x01\x00\x01\x00\x02\x01\x03\x00\x02\x00\x07\x00\x02\x01\x04\x00\x04\x00",
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
		m := &queueModel{capacity: capacity, keyed: keyed, maxAge: maxAge, inFlight: map[string]int{}}
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
			op, arg := data[0]%10, data[1]
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
					m.take(mi)
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
			"statuspatch.queue.enqueued{queue=fuzz}":                st2f(st.Enqueued),
			"statuspatch.queue.dequeued{queue=fuzz}":                st2f(st.Dequeued),
			"statuspatch.queue.superseded{queue=fuzz}":              st2f(st.Superseded),
			"statuspatch.queue.dropped{queue=fuzz,reason=full}":     st2f(st.DroppedFull),
			"statuspatch.queue.dropped{queue=fuzz,reason=closed}":   st2f(st.DroppedClosed),
			"statuspatch.queue.dropped{queue=fuzz,reason=expired}":  st2f(st.DroppedExpired),
			"statuspatch.queue.depth{queue=fuzz}":                   float64(st.Depth),
			"statuspatch.queue.wait{queue=fuzz}#count":              st2f(st.Dequeued),
			"statuspatch.queue.capacity{queue=fuzz}":                float64(capacity),
			"statuspatch.queue.depth.peak_ewma{queue=fuzz}#present": 1,
		}
		if m.closed { // Close unregisters the gauges.
			delete(want, "statuspatch.queue.capacity{queue=fuzz}")
			delete(want, "statuspatch.queue.depth.peak_ewma{queue=fuzz}#present")
		}
		for k, v := range want {
			if v == 0 && k != "statuspatch.queue.depth{queue=fuzz}" {
				delete(want, k) // counters never added to are absent
			}
		}
		if _, ok := got["statuspatch.queue.depth.peak_ewma{queue=fuzz}"]; ok {
			got["statuspatch.queue.depth.peak_ewma{queue=fuzz}#present"] = 1
			delete(got, "statuspatch.queue.depth.peak_ewma{queue=fuzz}")
		}
		delete(got, "statuspatch.queue.wait{queue=fuzz}#sum")
		if st.Enqueued == 0 && st.Depth == 0 {
			// depth was never added to: absent.
			delete(want, "statuspatch.queue.depth{queue=fuzz}")
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Fatalf("instruments (-want +got):\n%s", d)
		}
		q.Close()
	})
}

func st2f(n int64) float64 { return float64(n) }
