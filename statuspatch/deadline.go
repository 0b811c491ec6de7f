package statuspatch

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// serverTimeoutMargin bounds how much earlier than ctx's deadline
// [ServerTimeout] tells the API server to give a request up.
const serverTimeoutMargin = 100 * time.Millisecond

// ServerTimeout returns the timeout to send the API server, as the query
// parameter timeout, for a request made now under ctx: what is left of
// ctx's deadline, less a tenth of it but at most 100 ms,
// floored to the millisecond. The margin lets the server's 504 reach the
// client before the client's own deadline, so that the call is counted as
// abandoned by the server (outcome.Abandoned) rather than timed out. The
// server counts the timeout from when it received the request's headers:
// a request delayed before that by more than the margin gets as much more
// time, counted from its sending.
//
// ok is false when ctx is done or less than a millisecond would be left:
// send nothing (the server reads a timeout of 0 as its own default, 60 s).
// Without a deadline it returns 0, true: send no timeout.
func ServerTimeout(ctx context.Context) (d time.Duration, ok bool) {
	return serverTimeoutAt(ctx, time.Now())
}

// serverTimeoutAt is ServerTimeout at now.
func serverTimeoutAt(ctx context.Context, now time.Time) (d time.Duration, ok bool) {
	deadline, has := ctx.Deadline()
	if !has {
		return 0, ctx.Err() == nil
	}
	left := deadline.Sub(now)
	left -= min(left/10, serverTimeoutMargin)
	d = left.Truncate(time.Millisecond)
	if d < time.Millisecond || ctx.Err() != nil {
		return 0, false
	}
	return d, true
}

// statusClient makes the PATCH requests of the status subresource of one
// resource for [MergePatcher] and [ApplyPatcher].
type statusClient struct {
	rest         rest.Interface
	gvr          schema.GroupVersionResource
	fieldManager string
}

// request is the PATCH of type pt of the status of namespace/name by
// fieldManager, without client-side retries, with ctx's deadline as its
// timeout parameter ([ServerTimeout]) and no client-side timeout beyond
// ctx's (so that the server's 504 can reach the client first), or an
// error wrapping context.DeadlineExceeded when the deadline leaves no
// time: send nothing.
func (c statusClient) request(ctx context.Context, pt types.PatchType, namespace, name, fieldManager string) (*rest.Request, error) {
	path := []string{"/apis", c.gvr.Group, c.gvr.Version}
	if c.gvr.Group == "" {
		path = []string{"/api", c.gvr.Version}
	}
	if namespace != "" {
		path = append(path, "namespaces", namespace)
	}
	path = append(path, c.gvr.Resource, name, "status")
	req := c.rest.Patch(pt).AbsPath(path...).Param("fieldManager", fieldManager).MaxRetries(0)
	timeout, ok := ServerTimeout(ctx)
	if !ok {
		return nil, fmt.Errorf("not sent: its deadline leaves no time: %w", context.DeadlineExceeded)
	}
	// Timeout(0): client-go would otherwise set the parameter from its own
	// (rest.Config.Timeout) and cut the request there.
	req = req.Timeout(0)
	if timeout > 0 {
		req = req.Param("timeout", timeout.String())
	}
	return req, nil
}
