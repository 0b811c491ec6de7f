package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// bar is a one-line progress bar. On a terminal it redraws itself in place;
// otherwise (make piped into a file, CI) it prints a line at every 25 %.
type bar struct {
	w     io.Writer
	tty   bool
	label string

	mu       sync.Mutex
	lastStep int
	drawn    bool
}

func newBar(w io.Writer, label string) *bar {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &bar{w: w, tty: tty, label: label, lastStep: -1}
}

const barWidth = 40

// set shows done of total.
func (b *bar) set(done, total int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if total <= 0 {
		return
	}
	done = min(max(done, 0), total)
	if b.tty {
		fill := done * barWidth / total
		fmt.Fprintf(b.w, "\r   [%s%s] %*d/%d %s", strings.Repeat("#", fill), strings.Repeat(".", barWidth-fill), len(fmt.Sprint(total)), done, total, b.label)
		b.drawn = true
		return
	}
	step := done * 4 / total // 0..4
	if step > b.lastStep {
		b.lastStep = step
		fmt.Fprintf(b.w, "   %3d%%  %d/%d %s\n", step*25, done, total, b.label)
	}
}

// finish ends the bar's line.
func (b *bar) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tty && b.drawn {
		fmt.Fprintln(b.w)
		b.drawn = false
	}
}
