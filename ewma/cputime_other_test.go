//go:build !unix

package ewma_test

import "time"

// processCPU is not available here: it returns false.
func processCPU() (time.Duration, bool) { return 0, false }
