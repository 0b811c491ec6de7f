package controller

import (
	"os"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"
)

// rbacRules reads the ClusterRole and the Role of deploy/rbac.yaml.
func rbacRules(t *testing.T) (cluster, lease []rbacv1.PolicyRule) {
	t.Helper()
	b, err := os.ReadFile("../deploy/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var obj struct {
			Kind  string              `json:"kind"`
			Rules []rbacv1.PolicyRule `json:"rules"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("deploy/rbac.yaml: %v", err)
		}
		switch obj.Kind {
		case "ClusterRole":
			cluster = append(cluster, obj.Rules...)
		case "Role":
			lease = append(lease, obj.Rules...)
		}
	}
	if len(cluster) == 0 || len(lease) == 0 {
		t.Fatal("deploy/rbac.yaml: no ClusterRole or no Role rules")
	}
	return cluster, lease
}

func has(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }

// allows reports whether one of rules allows verb on group/resource (with
// subresource, as "resource/sub") named name ("" when the request has no
// name).
func allows(rules []rbacv1.PolicyRule, verb, group, resource, name string) bool {
	for _, r := range rules {
		if has(r.Verbs, verb) && has(r.APIGroups, group) && has(r.Resources, resource) &&
			(len(r.ResourceNames) == 0 || (name != "" && slices.Contains(r.ResourceNames, name))) {
			return true
		}
	}
	return false
}

// requestName is the name an authorizer sees: the object's name, or the
// metadata.name of a list or watch's field selector.
func requestName(a k8stesting.Action) string {
	switch a := a.(type) {
	case interface{ GetName() string }: // get, delete, patch
		return a.GetName()
	case k8stesting.UpdateAction:
		if m, err := meta.Accessor(a.GetObject()); err == nil {
			return m.GetName()
		}
	case k8stesting.WatchAction:
		if s := a.GetWatchRestrictions().Fields; s != nil {
			if n, ok := s.RequiresExactMatch("metadata.name"); ok {
				return n
			}
		}
	case k8stesting.ListAction:
		if s := a.GetListRestrictions().Fields; s != nil {
			if n, ok := s.RequiresExactMatch("metadata.name"); ok {
				return n
			}
		}
	}
	return ""
}

// checkRBAC fails the test for every request the controller made that
// deploy/rbac.yaml does not allow: the manifests must grant what the code
// calls. Leases are checked against the Role (the controller's namespace),
// everything else against the ClusterRole.
func checkRBAC(t *testing.T, leaseName string, actions ...[]k8stesting.Action) {
	t.Helper()
	cluster, lease := rbacRules(t)
	seen := map[string]bool{}
	for _, list := range actions {
		for _, a := range list {
			gvr := a.GetResource()
			if gvr.Resource == "" { // discovery and other non-resource requests
				continue
			}
			resource := gvr.Resource
			if sub := a.GetSubresource(); sub != "" {
				resource += "/" + sub
			}
			name := requestName(a)
			if a.GetVerb() == "create" {
				name = "" // RBAC cannot limit create by name
			}
			rules := cluster
			if gvr.Resource == "leases" {
				rules = lease
				if name != "" && name != leaseName {
					t.Errorf("request %s %s named %q, not the Lease %q", a.GetVerb(), resource, name, leaseName)
				}
			}
			key := a.GetVerb() + " " + gvr.Group + "/" + resource
			if gvr.Resource == "leases" && name != "" {
				key += " " + name
			}
			if !allows(rules, a.GetVerb(), gvr.Group, resource, name) && !seen[key] {
				t.Errorf("deploy/rbac.yaml does not allow the request the controller made: %s %q", key, name)
			}
			seen[key] = true
		}
	}
	if len(seen) == 0 {
		t.Error("no requests recorded")
	}
	t.Logf("requests made (all allowed by deploy/rbac.yaml): %q", keys(seen))
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
