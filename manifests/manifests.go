// Package manifests holds the shipped Kubernetes manifests as bytes and as
// typed objects, so that tests read what users apply: the unit test of the
// DaemonSet's conventions and the VM test that starts the agent exactly as
// the DaemonSet would (e2e/cluster) take its args, env and mounts from here.
package manifests

import (
	"bytes"
	_ "embed"
	"fmt"
	"regexp"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// KubeIPVS is manifests/kube-ipvs.yaml: RBAC and the DaemonSet.
//
//go:embed kube-ipvs.yaml
var KubeIPVS []byte

// KubeProxyConfigMap is manifests/kube-proxy-configmap.yaml, the ConfigMap
// for clusters without kubeadm.
//
//go:embed kube-proxy-configmap.yaml
var KubeProxyConfigMap []byte

// KubeProxyPatch is the strategic merge patch that keeps kube-proxy's
// DaemonSet off the nodes kube-ipvs serves (docs/migration.md).
//
//go:embed migration/kubeproxydaemonset+strategic.yaml
var KubeProxyPatch []byte

// Objects are the documents of kube-ipvs.yaml, typed.
type Objects struct {
	ServiceAccount     *corev1.ServiceAccount
	ClusterRole        *rbacv1.ClusterRole
	ClusterRoleBinding *rbacv1.ClusterRoleBinding
	DaemonSet          *appsv1.DaemonSet
}

// Decode reads a multi-document YAML stream strictly (an unknown field,
// such as a misspelt one, is an error) into the kinds Objects holds; any
// other kind, or a kind twice, is an error.
func Decode(data []byte) (Objects, error) {
	var o Objects
	for i, doc := range Documents(data) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return o, fmt.Errorf("document %d: %w", i+1, err)
		}
		var target any
		switch tm.Kind {
		case "ServiceAccount":
			target = set(&o.ServiceAccount)
		case "ClusterRole":
			target = set(&o.ClusterRole)
		case "ClusterRoleBinding":
			target = set(&o.ClusterRoleBinding)
		case "DaemonSet":
			target = set(&o.DaemonSet)
		default:
			return o, fmt.Errorf("document %d: unexpected kind %q", i+1, tm.Kind)
		}
		if target == nil {
			return o, fmt.Errorf("document %d: a second %s", i+1, tm.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, target); err != nil {
			return o, fmt.Errorf("document %d (%s): %w", i+1, tm.Kind, err)
		}
	}
	return o, nil
}

// set allocates *p and returns it, or nil when *p is already set.
func set[T any](p **T) *T {
	if *p != nil {
		return nil
	}
	*p = new(T)
	return *p
}

// Documents splits a YAML stream at its "---" lines, dropping documents
// that hold only comments or nothing.
func Documents(data []byte) [][]byte {
	var out [][]byte
	for _, doc := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(data), -1) {
		if hasContent([]byte(doc)) {
			out = append(out, []byte(doc))
		}
	}
	return out
}

func hasContent(doc []byte) bool {
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if l = bytes.TrimSpace(l); len(l) > 0 && l[0] != '#' {
			return true
		}
	}
	return false
}

// varRef is a $(NAME) reference in a container's command or args.
var varRef = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// Expand resolves $(NAME) references in args as the kubelet does: NAME is
// one of env's names; "$$" is a literal "$"; a reference to a name that is
// not defined stays as written. env holds the container's variables already
// resolved (fieldRef spec.nodeName and the like).
func Expand(args []string, env map[string]string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = varRef.ReplaceAllStringFunc(a, func(m string) string {
			if m == "$$" {
				return "$"
			}
			if v, ok := env[m[2:len(m)-1]]; ok {
				return v
			}
			return m
		})
	}
	return out
}

// Env resolves a container's environment for a pod on node: literal
// values and the fieldRef spec.nodeName; any other source is an error, so
// a test that starts the container's process knows it set everything.
func Env(c corev1.Container, node string) (map[string]string, error) {
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = Expand([]string{e.Value}, env)[0]
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			env[e.Name] = node
		default:
			return nil, fmt.Errorf("env %s: only values and fieldRef spec.nodeName are resolved here", e.Name)
		}
	}
	return env, nil
}
