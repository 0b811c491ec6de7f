package quietpatch_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	restfake "k8s.io/client-go/rest/fake"
)

// fakeREST is a REST client over client-go's fake dynamic client: it
// applies the status PATCH requests of statuspatch.NewStatusPatcher
// (.../namespaces/<ns>/<resource>/<name>/status) of resource gvr to dyn,
// and answers as the API server would. A controller passes a real client
// (statuspatch.NewStatusPatcherForConfig).
func fakeREST(dyn dynamic.Interface, gvr schema.GroupVersionResource) rest.Interface {
	return &restfake.RESTClient{
		NegotiatedSerializer: serializer.NewCodecFactory(runtime.NewScheme()).WithoutConversion(),
		Client: restfake.CreateHTTPClient(func(req *http.Request) (*http.Response, error) {
			parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
			n := len(parts)
			if req.Method != http.MethodPatch || n < 6 || parts[n-1] != "status" || parts[n-3] != gvr.Resource || parts[n-5] != "namespaces" {
				return answer(apierrors.NewBadRequest("fakeREST serves status patches only, not " + req.Method + " " + req.URL.Path))
			}
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return nil, err
			}
			obj, err := dyn.Resource(gvr).Namespace(parts[n-4]).Patch(req.Context(), parts[n-2], types.PatchType(req.Header.Get("Content-Type")),
				body, metav1.PatchOptions{FieldManager: req.URL.Query().Get("fieldManager")}, "status")
			if err != nil {
				return answer(err)
			}
			b, err := json.Marshal(obj)
			if err != nil {
				return nil, err
			}
			return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(bytes.NewReader(b))}, nil
		}),
	}
}

// answer is the response of the API server with err's status.
func answer(err error) (*http.Response, error) {
	st := apierrors.APIStatus(apierrors.NewInternalError(err))
	if s, ok := err.(apierrors.APIStatus); ok {
		st = s
	}
	status := st.Status()
	status.Kind, status.APIVersion = "Status", "v1"
	b, merr := json.Marshal(status)
	if merr != nil {
		return nil, merr
	}
	return &http.Response{StatusCode: int(status.Code), Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(bytes.NewReader(b))}, nil
}
