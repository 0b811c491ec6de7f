package statuspatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/quietpatch/quietpatch/statuspatch"
	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// The ready patcher sends a JSON merge patch of the status subresource with
// a resourceVersion precondition, a field manager, and the call's deadline
// as the timeout parameter, which the API server enforces. Here it talks
// to a stand-in for the API server.
func ExampleMergePatcher() {
	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	// A stand-in for the API server.
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		q := req.URL.Query()
		timeout, _ := time.ParseDuration(q.Get("timeout"))
		fmt.Println(req.Method, req.URL.Path, "fieldManager="+q.Get("fieldManager"),
			"timeout within the deadline:", timeout > 0 && timeout < 5*time.Second)
		fmt.Println(string(body))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	defer server.Close()
	patcher, err := statuspatch.NewMergePatcher(&rest.Config{Host: server.URL}, gvr, "example.com/widget-status")
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = patcher.Patch(ctx, statuspatch.MergePatch{
		Namespace: "demo", Name: "a", ResourceVersion: "7", Status: json.RawMessage(`{"phase":"Ready"}`),
	})
	fmt.Println("patch:", outcome.Of(err))

	// Without a resourceVersion there is no precondition: nothing is sent.
	err = patcher.Patch(ctx, statuspatch.MergePatch{Namespace: "demo", Name: "a", Status: json.RawMessage(`{}`)})
	fmt.Println(errors.Is(err, statuspatch.ErrInvalidPatch))
	// Output:
	// PATCH /apis/example.com/v1/namespaces/demo/widgets/a/status fieldManager=example.com/widget-status timeout within the deadline: true
	// {"metadata":{"resourceVersion":"7"},"status":{"phase":"Ready"}}
	// patch: ok
	// true
}
