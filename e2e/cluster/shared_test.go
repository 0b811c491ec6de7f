package cluster

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// fatalTB is a testing.TB whose Fatal* record the message and end the
// calling goroutine, as the real ones do, without failing the outer test.
type fatalTB struct {
	testing.TB
	mu    sync.Mutex
	fatal []string
}

func (f *fatalTB) Helper()                           {}
func (f *fatalTB) Logf(format string, args ...any)   {}
func (f *fatalTB) Fatalf(format string, args ...any) { f.record(fmt.Sprintf(format, args...)) }
func (f *fatalTB) record(msg string) {
	f.mu.Lock()
	f.fatal = append(f.fatal, msg)
	f.mu.Unlock()
	runtime.Goexit()
}

// get calls s.Get on f in a goroutine and reports whether it returned.
func (f *fatalTB) get(s *Shared) bool {
	done := make(chan bool, 1)
	go func() {
		returned := false
		defer func() { done <- returned }() // Goexit runs deferred calls too
		s.Get(f)
		returned = true
	}()
	return <-done
}

func TestSharedFailsTheSameWayEveryTime(t *testing.T) {
	s := Shared{Options: Options{StartTimeout: -1}}
	tb := &fatalTB{TB: t}
	for i := range 2 {
		if tb.get(&s) {
			t.Fatalf("Get #%d returned a control plane for invalid Options", i+1)
		}
	}
	if len(tb.fatal) != 2 {
		t.Fatalf("Get failed the test %d times, want 2: %q", len(tb.fatal), tb.fatal)
	}
	for _, msg := range tb.fatal {
		if !strings.Contains(msg, "Options.StartTimeout") {
			t.Errorf("Get failed with %q, want the error naming Options.StartTimeout", msg)
		}
	}
	if err := s.Stop(); err != nil {
		t.Errorf("Stop after a failed start = %v, want nil", err)
	}
}

func TestSharedStopBeforeGet(t *testing.T) {
	var s Shared
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop of an unstarted Shared = %v, want nil", err)
	}
	tb := &fatalTB{TB: t}
	if tb.get(&s) {
		t.Fatal("Get after Stop returned a control plane; want it to fail")
	}
	if len(tb.fatal) != 1 || !strings.Contains(tb.fatal[0], ErrStopped.Error()) {
		t.Fatalf("Get after Stop failed with %q, want one message with %q", tb.fatal, ErrStopped)
	}
	if !errors.Is(s.err, ErrStopped) {
		t.Fatalf("Shared.err = %v, want ErrStopped", s.err)
	}
}
