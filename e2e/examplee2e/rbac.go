package examplee2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"
)

// RBAC is the access control the example ships in
// examples/httproute-status/deploy: its ClusterRoles, Roles and their
// bindings, as read from the manifests. Apply grants exactly these rules to a
// ServiceAccount of the caller's choosing.
type RBAC struct {
	ClusterRoles        []*rbacv1.ClusterRole
	Roles               []*rbacv1.Role
	ClusterRoleBindings []*rbacv1.ClusterRoleBinding
	RoleBindings        []*rbacv1.RoleBinding
	// Files are the manifests read, relative to the directory.
	Files []string
}

// LoadRBAC reads every *.yaml and *.yml file of dir (multi-document files
// included) and keeps the rbac.authorization.k8s.io/v1 objects; other kinds
// (ServiceAccount, Deployment, ...) are skipped. It returns an error
// wrapping ErrNoRBAC when there is no ClusterRole or Role, or a ClusterRole
// or Role has no binding, so that a caller may wait for the manifests to be
// written.
func LoadRBAC(dir string) (*RBAC, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %v", ErrNoRBAC, err)
		}
		return nil, fmt.Errorf("examplee2e: %w", err)
	}
	r := &RBAC{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("examplee2e: %w", err)
		}
		n, err := r.add(b)
		if err != nil {
			return nil, fmt.Errorf("examplee2e: %s: %w", name, err)
		}
		if n > 0 {
			r.Files = append(r.Files, name)
		}
	}
	if len(r.ClusterRoles)+len(r.Roles) == 0 {
		return nil, fmt.Errorf("%w in %s", ErrNoRBAC, dir)
	}
	if len(r.ClusterRoleBindings)+len(r.RoleBindings) == 0 {
		return nil, fmt.Errorf("%w: %s has roles but no bindings", ErrNoRBAC, dir)
	}
	return r, nil
}

// add parses the documents of one file; it returns how many RBAC objects it
// kept.
func (r *RBAC) add(b []byte) (int, error) {
	rd := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	kept := 0
	for {
		doc, err := rd.Read()
		if err == io.EOF {
			return kept, nil
		}
		if err != nil {
			return kept, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return kept, err
		}
		if tm.APIVersion != rbacv1.SchemeGroupVersion.String() {
			continue
		}
		var into any
		switch tm.Kind {
		case "ClusterRole":
			o := &rbacv1.ClusterRole{}
			r.ClusterRoles, into = append(r.ClusterRoles, o), o
		case "Role":
			o := &rbacv1.Role{}
			r.Roles, into = append(r.Roles, o), o
		case "ClusterRoleBinding":
			o := &rbacv1.ClusterRoleBinding{}
			r.ClusterRoleBindings, into = append(r.ClusterRoleBindings, o), o
		case "RoleBinding":
			o := &rbacv1.RoleBinding{}
			r.RoleBindings, into = append(r.RoleBindings, o), o
		default:
			continue
		}
		if err := yaml.UnmarshalStrict(doc, into); err != nil {
			return kept, fmt.Errorf("%s: %w", tm.Kind, err)
		}
		kept++
	}
}

// Merge returns the RBAC of r and of others together: every role and
// binding of each, in order. The objects are shared, not copied.
func (r *RBAC) Merge(others ...*RBAC) *RBAC {
	out := &RBAC{
		ClusterRoles: slices.Clone(r.ClusterRoles), Roles: slices.Clone(r.Roles),
		ClusterRoleBindings: slices.Clone(r.ClusterRoleBindings), RoleBindings: slices.Clone(r.RoleBindings),
		Files: slices.Clone(r.Files),
	}
	for _, o := range others {
		out.ClusterRoles = append(out.ClusterRoles, o.ClusterRoles...)
		out.Roles = append(out.Roles, o.Roles...)
		out.ClusterRoleBindings = append(out.ClusterRoleBindings, o.ClusterRoleBindings...)
		out.RoleBindings = append(out.RoleBindings, o.RoleBindings...)
		out.Files = append(out.Files, o.Files...)
	}
	return out
}

// Rules lists every rule, one line each, for display: "ClusterRole NAME:
// verbs on group/resources".
func (r *RBAC) Rules() []string {
	var out []string
	line := func(kind, name string, rule rbacv1.PolicyRule) string {
		var res []string
		for _, g := range rule.APIGroups {
			if g == "" {
				g = "core"
			}
			for _, rs := range rule.Resources {
				res = append(res, g+"/"+rs)
			}
		}
		s := fmt.Sprintf("%s %s: %s on %s", kind, name, strings.Join(rule.Verbs, ","), strings.Join(res, " "))
		if len(rule.ResourceNames) > 0 {
			s += " named " + strings.Join(rule.ResourceNames, ",")
		}
		return s
	}
	for _, cr := range r.ClusterRoles {
		for _, rule := range cr.Rules {
			out = append(out, line("ClusterRole", cr.Name, rule))
		}
	}
	for _, ro := range r.Roles {
		for _, rule := range ro.Rules {
			out = append(out, line("Role", ro.Name, rule))
		}
	}
	return out
}

// Apply grants the ServiceAccount namespace/serviceAccount exactly the
// rights of the manifests: each ClusterRole as is (shared by every
// ServiceAccount Apply is called for); each Role in namespace (the
// controller's own namespace, where its Lease lives, whatever namespace the
// manifest names); and a copy of each binding whose only subject is the
// ServiceAccount, named after the original plus "-" + serviceAccount (a
// ClusterRoleBinding: plus "-" + namespace + "-" + serviceAccount). Objects
// that exist are updated to the manifests' content.
//
// Rules are not rewritten: the deploy Role grants the Lease by name
// (resourceNames), so replicas must use that --lease-name; give each
// Deployment its own namespace rather than its own Lease name.
func (r *RBAC) Apply(ctx context.Context, kube kubernetes.Interface, namespace, serviceAccount string) error {
	rb := kube.RbacV1()
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: serviceAccount}}
	for _, cr := range r.ClusterRoles {
		o := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: cr.Name, Labels: cr.Labels}, Rules: cr.Rules, AggregationRule: cr.AggregationRule}
		if err := upsert(ctx, o, rb.ClusterRoles().Create, rb.ClusterRoles().Get, rb.ClusterRoles().Update,
			func(cur, want *rbacv1.ClusterRole) { cur.Rules, cur.AggregationRule = want.Rules, want.AggregationRule }); err != nil {
			return err
		}
	}
	for _, ro := range r.Roles {
		o := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: ro.Name, Namespace: namespace, Labels: ro.Labels}, Rules: ro.Rules}
		c := rb.Roles(namespace)
		if err := upsert(ctx, o, c.Create, c.Get, c.Update, func(cur, want *rbacv1.Role) { cur.Rules = want.Rules }); err != nil {
			return err
		}
	}
	for _, b := range r.ClusterRoleBindings {
		o := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: b.Name + "-" + namespace + "-" + serviceAccount}, RoleRef: b.RoleRef, Subjects: subject}
		if err := upsert(ctx, o, rb.ClusterRoleBindings().Create, rb.ClusterRoleBindings().Get, rb.ClusterRoleBindings().Update,
			func(cur, want *rbacv1.ClusterRoleBinding) { cur.Subjects = want.Subjects }); err != nil {
			return err
		}
	}
	for _, b := range r.RoleBindings {
		ref := b.RoleRef
		if ref.Kind == "Role" && !slices.ContainsFunc(r.Roles, func(ro *rbacv1.Role) bool { return ro.Name == ref.Name }) {
			return fmt.Errorf("examplee2e: RoleBinding %s refers to Role %s, which the manifests do not define", b.Name, ref.Name)
		}
		o := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: b.Name + "-" + serviceAccount, Namespace: namespace}, RoleRef: ref, Subjects: subject}
		c := rb.RoleBindings(namespace)
		if err := upsert(ctx, o, c.Create, c.Get, c.Update, func(cur, want *rbacv1.RoleBinding) { cur.Subjects = want.Subjects }); err != nil {
			return err
		}
	}
	return nil
}

// upsert creates o, or, if it exists, updates the existing object with
// o's content (copy). roleRef is immutable, so bindings only copy subjects.
func upsert[T interface {
	*O
	metav1.Object
}, O any](ctx context.Context, o T,
	create func(context.Context, T, metav1.CreateOptions) (T, error),
	get func(context.Context, string, metav1.GetOptions) (T, error),
	update func(context.Context, T, metav1.UpdateOptions) (T, error),
	copyInto func(cur, want T),
) error {
	_, err := create(ctx, o, metav1.CreateOptions{FieldManager: fieldManager})
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("examplee2e: creating %T %s: %w", o, o.GetName(), err)
	}
	// Several Deployments may apply the same ClusterRole at once.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := get(ctx, o.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		copyInto(cur, o)
		_, err = update(ctx, cur, metav1.UpdateOptions{FieldManager: fieldManager})
		return err
	})
	if err != nil {
		return fmt.Errorf("examplee2e: updating %T %s: %w", o, o.GetName(), err)
	}
	return nil
}

// fieldManager names the harness in managedFields.
const fieldManager = "quietpatch-e2e"
