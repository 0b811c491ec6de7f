package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"
)

var queueFuzzT0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// queueModel is the reference queue, written from statuspatch.PatchQueue's
// documented rules with slices and maps: a FIFO slice per lane, the keys
// waiting and held, the reservations, and the greatest depth so far (the
// depth's Peak-EWMA on a clock that stands still).
type queueModel struct {
	capacity int
	closed   bool
	fifo     [2][]string // keys ready, per lane, in order
	waiting  map[string]queueModelWait
	held     map[string]bool
	reserved [2]int
	burst    int // fresh keys served in a row while pass keys waited; at most 8 (the doc's bound, not FreshBurst)
	permits  []bool
	rooms    []queueModelRoom
	stats    Stats
	maxDepth int
}

type queueModelWait struct {
	lane   Lane
	queued bool // ready, in its lane's fifo; false while held
}

// queueModelRoom is a Room channel and whether it must be closed by now.
type queueModelRoom struct {
	lane   Lane
	free   int
	ch     <-chan struct{}
	closed bool
}

// count is what the bound applies to: keys waiting in lane l, and its
// reservations.
func (m *queueModel) count(l Lane) int {
	n := m.reserved[l]
	for _, w := range m.waiting {
		if w.lane == l {
			n++
		}
	}
	return n
}

func (m *queueModel) admit(l Lane) error {
	switch {
	case m.closed:
		m.stats.DroppedClosed++
		return ErrClosed
	case m.count(l) >= m.capacity:
		m.stats.DroppedFull++
		return ErrFull
	}
	return nil
}

// insert adds key to lane l: a key that waits coalesces (moving to the
// fresh lane if added fresh while it waits in the pass lane, room
// permitting); a key held waits until Done.
func (m *queueModel) insert(key string, l Lane) {
	m.stats.Enqueued++
	if w, ok := m.waiting[key]; ok {
		m.stats.Coalesced++
		if w.lane == LanePass && l == LaneFresh && m.count(LaneFresh) < m.capacity {
			if w.queued {
				m.fifo[LanePass] = slices.DeleteFunc(m.fifo[LanePass], func(k string) bool { return k == key })
				m.fifo[LaneFresh] = append(m.fifo[LaneFresh], key)
			}
			m.waiting[key] = queueModelWait{lane: LaneFresh, queued: w.queued}
		}
		return
	}
	m.waiting[key] = queueModelWait{lane: l, queued: !m.held[key]}
	m.maxDepth = max(m.maxDepth, len(m.waiting))
	if !m.held[key] {
		m.fifo[l] = append(m.fifo[l], key)
	}
}

func (m *queueModel) add(key string, l Lane) error {
	if _, ok := m.waiting[key]; !ok || m.closed {
		if err := m.admit(l); err != nil {
			return err
		}
	}
	m.insert(key, l)
	return nil
}

func (m *queueModel) reserve(l Lane) error {
	if err := m.admit(l); err != nil {
		return err
	}
	m.reserved[l]++
	return nil
}

// get is Get with a cancelled context: the next key by the lanes' rule,
// or ErrClosed once closed and drained, or context.Canceled.
func (m *queueModel) get() (string, error) {
	l := LanePass
	passWaits := len(m.fifo[LanePass]) > 0
	if len(m.fifo[LaneFresh]) > 0 && (!passWaits || m.burst < 8) {
		l = LaneFresh
		if passWaits {
			m.burst++
		}
	} else {
		m.burst = 0
	}
	if len(m.fifo[l]) == 0 {
		if m.closed && len(m.waiting) == 0 {
			return "", ErrClosed
		}
		return "", context.Canceled
	}
	key := m.fifo[l][0]
	m.fifo[l] = m.fifo[l][1:]
	delete(m.waiting, key)
	m.held[key] = true
	m.stats.Dequeued++
	return key, nil
}

func (m *queueModel) done(key string) {
	delete(m.held, key)
	if w, ok := m.waiting[key]; ok && !w.queued {
		m.waiting[key] = queueModelWait{lane: w.lane, queued: true}
		m.fifo[w.lane] = append(m.fifo[w.lane], key)
	}
}

func (m *queueModel) settleRooms() {
	for i := range m.rooms {
		r := &m.rooms[i]
		r.closed = r.closed || m.closed || m.capacity-m.count(r.lane) >= r.free
	}
}

func (m *queueModel) statsNow() Stats {
	s := m.stats
	s.DepthPeak = float64(m.maxDepth)
	s.Depth, s.Held = len(m.waiting), len(m.held)
	s.Fresh = m.count(LaneFresh) - m.reserved[LaneFresh]
	s.Reserved = m.reserved[LaneFresh] + m.reserved[LanePass]
	return s
}

// The ops of FuzzQueueModel's input.
const (
	fzAddFresh = iota // Add(key, LaneFresh)
	fzAddPass         // Add(key, LanePass)
	fzReserve         // Reserve(arg&1)
	fzSend            // permit arg>>3 (one past the end: the zero Permit) Send(key)
	fzRelease         // permit arg>>3 Release()
	fzGet             // Get(a cancelled ctx)
	fzDone            // Done(a key held, or any key if none or arg >= 200)
	fzCap             // SetCapacity(arg%6), if >= 1 (statuspatch.PatchQueue rejects the rest)
	fzClose           // Close(), if arg < 32
	fzRoom            // Room(arg&1, arg>>1%5)
	fzOps
)

// FuzzQueueModel runs random single-goroutine sequences of every
// queue operation against queueModel and checks after every step:
// the same errors, the same key delivered (by GetSince, with no time
// waited on a clock that stands still), the same Stats (the depth's
// Peak-EWMA included) and Cap, the same Room channels closed, the
// internal invariants (checkQueueInvariants: counts, one live entry per
// ready key, bounded FIFOs). Run it with go test -fuzz FuzzQueueModel.
//
// Input: byte 0 sets the capacity (1 + b%4); then each step is an op byte
// (mod fzOps) and an argument byte. Keys are k0..k5 (arg%6).
func FuzzQueueModel(f *testing.F) {
	burst := []byte{fzAddPass, 0, fzAddPass, 1}
	for i := range 20 {
		burst = append(burst, fzAddFresh, byte(2+i%4), fzGet, 0, fzDone, 0)
	}
	for _, seed := range [][]byte{
		// Fresh before pass, 8 fresh in a row at most while pass keys
		// wait: two pass keys, then a fresh key added per Get.
		append([]byte{3}, burst...),
		// Exclusivity: k0 held, added in both lanes, delivered after Done.
		{1, fzAddFresh, 0, fzGet, 0, fzAddPass, 0, fzAddFresh, 0, fzGet, 0, fzDone, 0, fzGet, 0, fzDone, 0, fzGet, 0},
		// Promotion refused at a full fresh lane, then done with room.
		{0, fzAddFresh, 1, fzAddPass, 2, fzAddFresh, 2, fzAddPass, 3, fzGet, 0, fzAddFresh, 2, fzAddPass, 3, fzGet, 0, fzGet, 0},
		// Permits: reserve both lanes, send a waiting key, release, use
		// twice, close, send after close, rooms waiting on them.
		{1, fzAddFresh, 0, fzRoom, 1<<1 | 0, fzReserve, 0, fzReserve, 1, fzSend, 0<<3 | 0, fzRelease, 1 << 3,
			fzSend, 2<<3 | 4, fzRoom, 0<<1 | 1, fzClose, 0, fzSend, 0<<3 | 0, fzRelease, 0, fzGet, 0, fzGet, 0},
		// Shrink, refuse, a capacity of 0 (skipped), grow; rooms.
		{3, fzAddFresh, 0, fzAddFresh, 1, fzAddFresh, 2, fzRoom, 2<<1 | 0, fzCap, 1, fzAddFresh, 3, fzGet, 0,
			fzCap, 0, fzCap, 4, fzAddFresh, 3, fzRoom, 3<<1 | 0, fzGet, 0},
		// Close with a key held back: drained after Done, then ErrClosed.
		{0, fzAddPass, 0, fzGet, 0, fzAddPass, 0, fzClose, 0, fzAddPass, 1, fzGet, 0, fzDone, 0, fzGet, 0, fzGet, 0},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		capacity := 1 + int(data[0]%4)
		data = data[1:]
		clk := clocktesting.NewFakePassiveClock(queueFuzzT0)
		q := New[string](capacity, clk)
		m := &queueModel{capacity: capacity, waiting: map[string]queueModelWait{}, held: map[string]bool{}}
		maxCap := capacity
		var permits []Permit[string]
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		sameErr := func(step int, what string, got, want error) {
			t.Helper()
			if !errors.Is(got, want) || (got == nil) != (want == nil) {
				t.Fatalf("step %d %s: error %v, model %v", step, what, got, want)
			}
		}
		for step := 0; len(data) >= 2; step++ {
			op, arg := data[0]%fzOps, data[1]
			data = data[2:]
			key := "k" + strconv.Itoa(int(arg%6))
			lane := Lane(arg & 1)
			var what string
			switch op {
			case fzAddFresh, fzAddPass:
				l := Lane(op)
				what = fmt.Sprintf("Add(%s, %d)", key, l)
				sameErr(step, what, q.Add(key, l), m.add(key, l))
			case fzReserve:
				what = fmt.Sprintf("Reserve(%d)", lane)
				p, err := q.Reserve(lane)
				merr := m.reserve(lane)
				sameErr(step, what, err, merr)
				if err == nil {
					permits = append(permits, p)
					m.permits = append(m.permits, false)
				}
			case fzSend, fzRelease:
				// A permit by number; one past the end is the zero
				// Permit.
				i := int(arg>>3) % (len(permits) + 1)
				var p Permit[string]
				if i < len(permits) {
					p = permits[i]
				}
				var merr error
				switch {
				case i == len(permits) || m.permits[i]:
					merr = ErrClosed // unusable, not counted
				default:
					m.permits[i] = true
					pl := p.lane
					m.reserved[pl]--
					if op == fzRelease {
						break
					}
					if m.closed {
						m.stats.DroppedClosed++
						merr = ErrClosed
						break
					}
					m.insert(key, pl)
				}
				if op == fzRelease {
					what = fmt.Sprintf("permit %d Release", i)
					p.Release()
					break
				}
				what = fmt.Sprintf("permit %d Send(%s)", i, key)
				sameErr(step, what, p.Send(key), merr)
			case fzGet:
				what = "Get"
				got, since, err := q.GetSince(cancelled)
				want, merr := m.get()
				sameErr(step, what, err, merr)
				if waited := clk.Now().Sub(since); got != want || err == nil && waited != 0 {
					t.Fatalf("step %d Get: key %q waited %v, model %q (no time passes)", step, got, waited, want)
				}
			case fzDone:
				// Mostly a key held; sometimes any key (harmless).
				if held := mapKeysSorted(m.held); len(held) > 0 && arg < 200 {
					key = held[int(arg)%len(held)]
				}
				what = "Done(" + key + ")"
				q.Done(key)
				m.done(key)
			case fzCap:
				n := int(arg % 6)
				if n < 1 {
					continue
				}
				what = fmt.Sprintf("SetCapacity(%d)", n)
				q.SetCapacity(n)
				m.capacity = n
				maxCap = max(maxCap, n)
			case fzClose:
				if arg >= 32 { // keep Close rare
					continue
				}
				what = "Close"
				q.Close()
				m.closed = true
			case fzRoom:
				if len(m.rooms) >= 16 {
					continue
				}
				free := int(arg>>1) % 5
				what = fmt.Sprintf("Room(%d, %d)", lane, free)
				m.rooms = append(m.rooms, queueModelRoom{lane: lane, free: free, ch: roomOf(q.Room(lane, free))})
			}
			m.settleRooms()
			for i, r := range m.rooms {
				select {
				case <-r.ch:
					if !r.closed {
						t.Fatalf("step %d %s: Room %d (lane %d, free %d) closed, model open", step, what, i, r.lane, r.free)
					}
				default:
					if r.closed {
						t.Fatalf("step %d %s: Room %d (lane %d, free %d) open, model closed", step, what, i, r.lane, r.free)
					}
				}
			}
			want, got := m.statsNow(), q.Stats()
			if d := cmp.Diff(want, got); d != "" {
				t.Fatalf("step %d %s: Stats (-model +queue):\n%s", step, what, d)
			}
			if q.Cap() != m.capacity {
				t.Fatalf("step %d %s: Cap %d, model %d", step, what, q.Cap(), m.capacity)
			}
			if got.Enqueued-got.Coalesced != got.Dequeued+int64(got.Depth) {
				t.Fatalf("step %d %s: enqueued %d - coalesced %d != dequeued %d + depth %d",
					step, what, got.Enqueued, got.Coalesced, got.Dequeued, got.Depth)
			}
			if err := checkQueueInvariants(q, maxCap); err != nil {
				t.Fatalf("step %d %s: %v", step, what, err)
			}
		}
		q.Close()
	})
}

func mapKeysSorted[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
