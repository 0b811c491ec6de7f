package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// InstallGatewayAPI creates the Gateway API standard-channel
// CustomResourceDefinitions (every CRD in config/crd/standard of the
// sigs.k8s.io/gateway-api module this binary links, read from the Go module
// cache; see GatewayAPICRDDir) and waits until all are Established. CRDs that
// exist already are left as they are. Other kinds in those manifests (the
// safe-upgrades ValidatingAdmissionPolicy) are not installed. Start calls it
// unless Options.SkipGatewayAPI.
func (cp *ControlPlane) InstallGatewayAPI(ctx context.Context) error {
	dir, err := GatewayAPICRDDir(ctx)
	if err != nil {
		return err
	}
	crds, err := ReadCRDs(dir)
	if err != nil {
		return err
	}
	return cp.InstallCRDs(ctx, crds...)
}

// InstallCRDs creates the CRDs (skipping those that exist) and waits until
// each is Established.
func (cp *ControlPlane) InstallCRDs(ctx context.Context, crds ...*apiextensionsv1.CustomResourceDefinition) error {
	c, err := apiextensionsclient.NewForConfig(cp.AdminConfig())
	if err != nil {
		return fmt.Errorf("cluster: apiextensions client: %w", err)
	}
	api := c.ApiextensionsV1().CustomResourceDefinitions()
	// Created concurrently: each create is mostly server-side schema work.
	errs := make([]error, len(crds))
	var wg sync.WaitGroup
	for i, crd := range crds {
		wg.Go(func() {
			if _, err := api.Create(ctx, crd, metav1.CreateOptions{FieldManager: "quietpatch-e2e"}); err != nil && !apierrors.IsAlreadyExists(err) {
				errs[i] = fmt.Errorf("cluster: creating CRD %s: %w", crd.Name, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, crd := range crds {
		name := crd.Name
		err := waitFor(ctx, "CRD "+name+" Established", nil, 50*time.Millisecond, func(ctx context.Context) error {
			got, err := api.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return nil
				}
			}
			return fmt.Errorf("CRD %s not Established yet", name)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// ReadCRDs parses every CustomResourceDefinition in the *.yaml files of dir
// (multi-document files allowed), in file-name order; other kinds are skipped.
func ReadCRDs(dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("cluster: reading %s: %w", f, err)
			}
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				return nil, fmt.Errorf("cluster: parsing %s: %w", f, err)
			}
			if tm.Kind != "CustomResourceDefinition" {
				continue
			}
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := yaml.UnmarshalStrict(doc, crd); err != nil {
				return nil, fmt.Errorf("cluster: parsing CRD in %s: %w", f, err)
			}
			out = append(out, crd)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("cluster: no CustomResourceDefinition in %s", dir)
	}
	return out, nil
}
