package cluster

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TokenLifetime is the lifetime requested for the ServiceAccount tokens that
// ConfigFor obtains.
const TokenLifetime = 24 * time.Hour

// ServiceAccountUsername is the user name the API server gives a
// ServiceAccount: system:serviceaccount:NAMESPACE:NAME. Audit events and
// RBAC subjects use it.
func ServiceAccountUsername(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// ConfigFor returns a rest.Config that authenticates as the ServiceAccount
// namespace/serviceAccount with a bearer token from the TokenRequest API (no
// client certificate), so the identity survives the FaultProxy. The namespace
// and the ServiceAccount are created if missing. The identity has no rights
// until granted some (Grant, GrantClusterRole).
//
// The config leaves QPS and Burst at zero, i.e. client-go's defaults (5/s,
// burst 10): the code under test should set its own limits.
func (cp *ControlPlane) ConfigFor(ctx context.Context, namespace, serviceAccount string) (*rest.Config, error) {
	if namespace == "" || serviceAccount == "" {
		return nil, fmt.Errorf("cluster: ConfigFor needs a namespace and a service account name, got %q and %q", namespace, serviceAccount)
	}
	if err := cp.EnsureNamespace(ctx, namespace); err != nil {
		return nil, err
	}
	c := cp.adminKube.CoreV1()
	_, err := c.ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: serviceAccount}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("cluster: creating service account %s/%s: %w", namespace, serviceAccount, err)
	}
	secs := int64(TokenLifetime / time.Second)
	tr, err := c.ServiceAccounts(namespace).CreateToken(ctx, serviceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("cluster: requesting a token for %s/%s: %w", namespace, serviceAccount, err)
	}
	return &rest.Config{
		Host:            cp.Host(),
		BearerToken:     tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.pki.caPEM},
		UserAgent:       "quietpatch-e2e/" + namespace + "/" + serviceAccount,
	}, nil
}

// EnsureNamespace creates the namespace if it does not exist.
//
// No controller manager runs, so deleting a namespace never completes (its
// finalizer is never removed): tests should use fresh namespaces (NewNamespace)
// rather than delete and recreate.
func (cp *ControlPlane) EnsureNamespace(ctx context.Context, name string) error {
	_, err := cp.adminKube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("cluster: creating namespace %s: %w", name, err)
	}
	return nil
}

// NewNamespace creates a namespace with a unique name starting with prefix
// and returns the name.
func (cp *ControlPlane) NewNamespace(ctx context.Context, prefix string) (string, error) {
	ns, err := cp.adminKube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("cluster: creating namespace %s*: %w", prefix, err)
	}
	return ns.Name, nil
}

// Grant gives the ServiceAccount namespace/serviceAccount the rules inside
// its namespace: a Role with those rules and a RoleBinding to it, both named
// "<serviceAccount>-" plus a generated suffix. Grants add up.
func (cp *ControlPlane) Grant(ctx context.Context, namespace, serviceAccount string, rules ...rbacv1.PolicyRule) error {
	if len(rules) == 0 {
		return fmt.Errorf("cluster: Grant to %s/%s needs at least one rule", namespace, serviceAccount)
	}
	rbac := cp.adminKube.RbacV1()
	role, err := rbac.Roles(namespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{GenerateName: serviceAccount + "-"},
		Rules:      rules,
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("cluster: creating role for %s/%s: %w", namespace, serviceAccount, err)
	}
	_, err = rbac.RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: serviceAccount}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("cluster: binding role %s to %s/%s: %w", role.Name, namespace, serviceAccount, err)
	}
	return nil
}

// GrantClusterRole binds an existing ClusterRole (for example "cluster-admin"
// or "view") to the ServiceAccount cluster-wide, with a ClusterRoleBinding
// named "<namespace>-<serviceAccount>-" plus a generated suffix.
func (cp *ControlPlane) GrantClusterRole(ctx context.Context, namespace, serviceAccount, clusterRole string) error {
	_, err := cp.adminKube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{GenerateName: namespace + "-" + serviceAccount + "-"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: serviceAccount}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("cluster: binding cluster role %s to %s/%s: %w", clusterRole, namespace, serviceAccount, err)
	}
	return nil
}
