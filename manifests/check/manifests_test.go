package check

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// manifestsDir is the shipped manifests/ folder, the one users point
// `kubectl apply -k` at.
const manifestsDir = ".."

// kubeadmObjects holds kubeadm v1.37's kube-proxy ConfigMap and DaemonSet:
// the pod labels and selector kube-ipvs' objects must stay clear of.
const kubeadmObjects = "../../internal/config/testdata/kubeadm-v1.37.2-kube-proxy.yaml"

// object is one document of a build: its kind, namespace and name, and the
// document itself for a typed or schema check.
type object struct {
	Kind, Namespace, Name string
	YAML                  []byte
}

func (o object) id() string { return o.Kind + " " + o.Namespace + "/" + o.Name }

// build runs kustomize, as `kubectl apply -k DIR` does, on dir.
func build(dir string) ([]object, error) {
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, err
	}
	var out []object
	for _, r := range m.Resources() {
		data, err := r.AsYAML()
		if err != nil {
			return nil, err
		}
		out = append(out, object{Kind: r.GetKind(), Namespace: r.GetNamespace(), Name: r.GetName(), YAML: data})
	}
	return out, nil
}

// overlay writes, in a fresh folder beside a copy of manifests/, a
// kustomization.yaml with body (a user's overlay) and builds it. The copy
// keeps the overlay's relative paths as a user's checkout has them.
func overlay(t *testing.T, body string) ([]object, error) {
	t.Helper()
	root := t.TempDir()
	if err := os.CopyFS(filepath.Join(root, "manifests"), os.DirFS(manifestsDir)); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "overlay")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return build(dir)
}

func ids(objs []object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.id())
	}
	slices.Sort(out)
	return out
}

func find(t *testing.T, objs []object, kind, name string) object {
	t.Helper()
	for _, o := range objs {
		if o.Kind == kind && o.Name == name {
			return o
		}
	}
	t.Fatalf("no %s %s in %v", kind, name, ids(objs))
	return object{}
}

// decode reads o strictly (a misspelt field is an error) into a typed v.
func decode(t *testing.T, o object, v any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(o.YAML, v); err != nil {
		t.Fatalf("%s: %v", o.id(), err)
	}
}

// base are the objects `kubectl apply -k manifests/` creates.
var base = []string{
	"ClusterRole /kube-ipvs",
	"ClusterRoleBinding /kube-ipvs",
	"DaemonSet kube-system/kube-ipvs",
	"ServiceAccount kube-system/kube-ipvs",
}

// `kubectl apply -k manifests/` creates the ServiceAccount, RBAC and
// DaemonSet, and nothing else: not the kube-proxy ConfigMap, which on a
// kubeadm cluster is kubeadm's and must not be overwritten.
func TestKustomizationBuildsTheAgent(t *testing.T) {
	objs, err := build(manifestsDir)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(objs); !reflect.DeepEqual(got, base) {
		t.Fatalf("objects %v, want %v", got, base)
	}
	var ds appsv1.DaemonSet
	decode(t, find(t, objs, "DaemonSet", "kube-ipvs"), &ds)
	if got := ds.Spec.Template.Spec.Containers[0].Image; got != "kube-ipvs:dev" {
		t.Errorf("image %q, want kube-ipvs:dev", got)
	}
	decode(t, find(t, objs, "ServiceAccount", "kube-ipvs"), &corev1.ServiceAccount{})
	decode(t, find(t, objs, "ClusterRole", "kube-ipvs"), &rbacv1.ClusterRole{})
	decode(t, find(t, objs, "ClusterRoleBinding", "kube-ipvs"), &rbacv1.ClusterRoleBinding{})
}

// The image is named kube-ipvs in the DaemonSet, so kustomize's images
// (an overlay's, or `kustomize edit set image kube-ipvs=...` in manifests/,
// as a release does) replaces it.
func TestKustomizationImageIsReplaceable(t *testing.T) {
	for _, tc := range []struct{ name, images, want string }{
		{"name and tag", "{name: kube-ipvs, newName: registry.example/kube-ipvs, newTag: v1.2.3}", "registry.example/kube-ipvs:v1.2.3"},
		{"tag", "{name: kube-ipvs, newTag: v1.2.3}", "kube-ipvs:v1.2.3"},
		{"digest", "{name: kube-ipvs, newName: registry.example/kube-ipvs, digest: 'sha256:" + strings.Repeat("ab", 32) + "'}", "registry.example/kube-ipvs@sha256:" + strings.Repeat("ab", 32)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := overlay(t, "resources: [../manifests]\nimages: ["+tc.images+"]\n")
			if err != nil {
				t.Fatal(err)
			}
			var ds appsv1.DaemonSet
			decode(t, find(t, objs, "DaemonSet", "kube-ipvs"), &ds)
			if got := ds.Spec.Template.Spec.Containers[0].Image; got != tc.want {
				t.Errorf("image %q, want %q", got, tc.want)
			}
		})
	}
}

// kubeadmKubeProxy is kube-proxy's DaemonSet as kubeadm v1.37 writes it.
func kubeadmKubeProxy(t *testing.T) appsv1.DaemonSet {
	t.Helper()
	data, err := os.ReadFile(kubeadmObjects)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var ds appsv1.DaemonSet
		if err := yaml.Unmarshal([]byte(doc), &ds); err == nil && ds.Kind == "DaemonSet" {
			return ds
		}
	}
	t.Fatalf("%s: no DaemonSet", kubeadmObjects)
	return appsv1.DaemonSet{}
}

// withMonitoring builds manifests/ with one monitoring component, as an
// operator's overlay would.
func withMonitoring(t *testing.T, component string) []object {
	t.Helper()
	objs, err := overlay(t, "resources: [../manifests]\ncomponents: [../manifests/monitoring/"+component+"]\n")
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// The metrics Service selects kube-ipvs' pods, those alone, on the port and
// with the job label kube-prometheus-stack's kube-proxy Service has; no
// kube-ipvs pod carries a label of kube-proxy's DaemonSet's selector.
func checkMetricsService(t *testing.T, objs []object) corev1.Service {
	t.Helper()
	var svc corev1.Service
	decode(t, find(t, objs, "Service", "kube-ipvs-metrics"), &svc)
	var ds appsv1.DaemonSet
	decode(t, find(t, objs, "DaemonSet", "kube-ipvs"), &ds)
	kp := kubeadmKubeProxy(t)

	sel := labels.SelectorFromSet(svc.Spec.Selector)
	if len(svc.Spec.Selector) == 0 || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("Service selector %v does not select kube-ipvs' pods (labels %v)", svc.Spec.Selector, ds.Spec.Template.Labels)
	}
	if sel.Matches(labels.Set(kp.Spec.Template.Labels)) {
		t.Errorf("Service selector %v selects kube-proxy's pods too (labels %v)", svc.Spec.Selector, kp.Spec.Template.Labels)
	}
	for k, v := range kp.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Labels[k] == v {
			t.Errorf("kube-ipvs' pods carry %s=%s, which kube-proxy's DaemonSet selects", k, v)
		}
	}
	if svc.Namespace != "kube-system" || svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service %s/%s clusterIP %q, want headless in kube-system as the chart's", svc.Namespace, svc.Name, svc.Spec.ClusterIP)
	}
	want := []corev1.ServicePort{{Name: "http-metrics", Port: 10249, TargetPort: intstr.FromInt32(10249), Protocol: corev1.ProtocolTCP}}
	if !reflect.DeepEqual(svc.Spec.Ports, want) {
		t.Errorf("ports %+v, want %+v", svc.Spec.Ports, want)
	}
	if got := svc.Labels["jobLabel"]; got != "kube-proxy" {
		t.Errorf("label jobLabel %q, want kube-proxy (the job alerts and dashboards select)", got)
	}
	return svc
}

// With the kube-prometheus-stack component, the chart's own kube-proxy
// ServiceMonitor selects the metrics Service (app and release labels, as
// the chart's values.yaml and servicemonitor.yaml name them for a release
// named kube-prometheus-stack), its Prometheus loads the alerts (release)
// without a second copy of the mixin's kube-proxy group it ships itself, and
// its Grafana sidecar finds the dashboard.
func TestMonitoringKubePrometheusStack(t *testing.T) {
	objs := withMonitoring(t, "kube-prometheus-stack")
	want := append(slices.Clone(base), "ConfigMap kube-system/kube-ipvs-dashboard", "PrometheusRule kube-system/kube-ipvs", "Service kube-system/kube-ipvs-metrics")
	slices.Sort(want)
	if got := ids(objs); !reflect.DeepEqual(got, want) {
		t.Fatalf("objects %v, want %v", got, want)
	}
	svc := checkMetricsService(t, objs)
	for k, v := range map[string]string{"app": "kube-prometheus-stack-kube-proxy", "release": "kube-prometheus-stack"} {
		if svc.Labels[k] != v {
			t.Errorf("Service label %s=%q, want %q (the chart's ServiceMonitor selector)", k, svc.Labels[k], v)
		}
	}

	rule := validate(t, find(t, objs, "PrometheusRule", "kube-ipvs"))
	if got := nested(rule, "metadata", "labels", "release"); got != "kube-prometheus-stack" {
		t.Errorf("PrometheusRule label release=%v, want kube-prometheus-stack", got)
	}
	if got := groupNames(t, rule); !reflect.DeepEqual(got, []string{"kube-ipvs"}) {
		t.Errorf("PrometheusRule groups %v, want [kube-ipvs] (the chart has kubernetes-system-kube-proxy)", got)
	}

	var cm corev1.ConfigMap
	decode(t, find(t, objs, "ConfigMap", "kube-ipvs-dashboard"), &cm)
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v, want grafana_dashboard=1", cm.Labels)
	}
	var dash struct{ UID string }
	if err := json.Unmarshal([]byte(cm.Data["grafana-dashboard.json"]), &dash); err != nil || dash.UID != "kube-ipvs-proxy" {
		t.Errorf("dashboard ConfigMap data: uid %q, %v", dash.UID, err)
	}
}

// With the prometheus-operator component, a ServiceMonitor of kube-ipvs'
// own scrapes the metrics Service under job kube-proxy, and the alerts are
// the mixin's kube-proxy group and kube-ipvs'.
func TestMonitoringPrometheusOperator(t *testing.T) {
	objs := withMonitoring(t, "prometheus-operator")
	want := append(slices.Clone(base), "PrometheusRule kube-system/kube-ipvs", "Service kube-system/kube-ipvs-metrics", "ServiceMonitor kube-system/kube-ipvs")
	slices.Sort(want)
	if got := ids(objs); !reflect.DeepEqual(got, want) {
		t.Fatalf("objects %v, want %v", got, want)
	}
	svc := checkMetricsService(t, objs)
	for _, k := range []string{"app", "release"} {
		if _, ok := svc.Labels[k]; ok {
			t.Errorf("Service label %s: kube-prometheus-stack's ServiceMonitor would scrape it a second time", k)
		}
	}

	sm := validate(t, find(t, objs, "ServiceMonitor", "kube-ipvs"))
	var spec struct {
		JobLabel          string
		Selector          struct{ MatchLabels map[string]string }
		NamespaceSelector struct{ MatchNames []string }
		Endpoints         []struct{ Port string }
	}
	remarshal(t, sm["spec"], &spec)
	if len(spec.Selector.MatchLabels) == 0 || !labels.SelectorFromSet(spec.Selector.MatchLabels).Matches(labels.Set(svc.Labels)) {
		t.Errorf("ServiceMonitor selector %v does not select the Service (labels %v)", spec.Selector.MatchLabels, svc.Labels)
	}
	if !slices.Contains(spec.NamespaceSelector.MatchNames, svc.Namespace) {
		t.Errorf("ServiceMonitor namespaces %v, not the Service's %s", spec.NamespaceSelector.MatchNames, svc.Namespace)
	}
	if job := svc.Labels[spec.JobLabel]; job != "kube-proxy" {
		t.Errorf("ServiceMonitor jobLabel %q gives job %q, want kube-proxy", spec.JobLabel, job)
	}
	if len(spec.Endpoints) != 1 || spec.Endpoints[0].Port != svc.Spec.Ports[0].Name {
		t.Errorf("ServiceMonitor endpoints %+v, want the Service's port %s", spec.Endpoints, svc.Spec.Ports[0].Name)
	}

	rule := validate(t, find(t, objs, "PrometheusRule", "kube-ipvs"))
	if got := groupNames(t, rule); !reflect.DeepEqual(got, []string{"kubernetes-system-kube-proxy", "kube-ipvs"}) {
		t.Errorf("PrometheusRule groups %v", got)
	}
}

// The two components cannot be combined: together they would scrape every
// agent twice and load two copies of the alerts.
func TestMonitoringComponentsExcludeEachOther(t *testing.T) {
	_, err := overlay(t, "resources: [../manifests]\ncomponents: [../manifests/monitoring/kube-prometheus-stack, ../manifests/monitoring/prometheus-operator]\n")
	if err == nil || !strings.Contains(err.Error(), "already registered id") {
		t.Fatalf("both monitoring components: %v, want a duplicate object refused", err)
	}
}

func groupNames(t *testing.T, rule map[string]any) []string {
	t.Helper()
	var spec struct{ Groups []struct{ Name string } }
	remarshal(t, rule["spec"], &spec)
	var out []string
	for _, g := range spec.Groups {
		out = append(out, g.Name)
	}
	return out
}

func remarshal(t *testing.T, in, out any) {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
}

func nested(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}
