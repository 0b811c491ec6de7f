package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

const (
	auditPolicyFile = "audit-policy.yaml"
	auditLogFile    = "audit.log"
)

// AuditPolicy is the API server's audit policy: every write (create, update,
// patch, delete, deletecollection) to a status subresource of any group, or
// to a coordination.k8s.io Lease, is recorded at level Metadata — who
// (user.username, groups), when, verb, resource, subresource,
// namespace/name, response code — once, when the response completes.
// Nothing else is recorded. The log is written in blocking mode: an event is
// in the file by the time the client has read the response, give or take the
// few microseconds between the response being sent and the write.
//
// kube-apiserver renews its own identity Lease in kube-system every ~10 s,
// so expect those events too.
const AuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
  resources:
  - group: "*"
    resources: ["*/status"]
  - group: "coordination.k8s.io"
    resources: ["leases"]
- level: None
`

// AuditFilter selects audit events. An empty field matches anything;
// Subresource NoSubresource matches only the main resource; Code 0 matches
// any response code. Verb is the Kubernetes verb, lower case ("patch").
type AuditFilter struct {
	Verb        string
	Username    string // e.g. ServiceAccountUsername(ns, name)
	APIGroup    string
	Resource    string
	Subresource string
	Namespace   string
	Name        string
	Code        int32
}

// Matches reports whether the event passes the filter.
func (f AuditFilter) Matches(e *auditv1.Event) bool {
	ref := e.ObjectRef
	if ref == nil {
		ref = &auditv1.ObjectReference{}
	}
	var code int32
	if e.ResponseStatus != nil {
		code = e.ResponseStatus.Code
	}
	return (f.Verb == "" || strings.EqualFold(f.Verb, e.Verb)) &&
		(f.Username == "" || f.Username == e.User.Username) &&
		(f.APIGroup == "" || f.APIGroup == ref.APIGroup) &&
		(f.Resource == "" || f.Resource == ref.Resource) &&
		matchSubresource(f.Subresource, ref.Subresource) &&
		(f.Namespace == "" || f.Namespace == ref.Namespace) &&
		(f.Name == "" || f.Name == ref.Name) &&
		(f.Code == 0 || f.Code == code)
}

// ParseAuditLog parses JSON-lines audit events. A final line without a
// newline (an event being written) is ignored; any other malformed line is an
// error naming its line number.
func ParseAuditLog(r io.Reader) ([]auditv1.Event, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var out []auditv1.Event
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if err == io.EOF {
			return out, nil // a partial last line is dropped
		}
		if err != nil {
			return out, fmt.Errorf("cluster: reading audit log: %w", err)
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var e auditv1.Event
		if err := json.Unmarshal(line, &e); err != nil {
			return out, fmt.Errorf("cluster: audit log line %d: %w", n, err)
		}
		out = append(out, e)
	}
}

// AuditEvents reads the whole audit log (see AuditPolicy). It keeps growing
// across API server restarts.
func (cp *ControlPlane) AuditEvents() ([]auditv1.Event, error) {
	f, err := os.Open(cp.AuditLogPath())
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	defer f.Close()
	return ParseAuditLog(f)
}

// FindAuditEvents returns the audit events that match f.
func (cp *ControlPlane) FindAuditEvents(f AuditFilter) ([]auditv1.Event, error) {
	all, err := cp.AuditEvents()
	if err != nil {
		return nil, err
	}
	var out []auditv1.Event
	for i := range all {
		if f.Matches(&all[i]) {
			out = append(out, all[i])
		}
	}
	return out, nil
}

// WaitForAuditEvent polls the audit log until an event matches f and returns
// the first one, or fails when ctx ends.
func (cp *ControlPlane) WaitForAuditEvent(ctx context.Context, f AuditFilter) (auditv1.Event, error) {
	var found auditv1.Event
	err := waitFor(ctx, fmt.Sprintf("audit event %+v", f), nil, 50*time.Millisecond, func(context.Context) error {
		evs, err := cp.FindAuditEvents(f)
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			return errNotYet
		}
		found = evs[0]
		return nil
	})
	return found, err
}
