package main

import (
	"io"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/kube-ipvs/kube-ipvs/internal/config"
	"github.com/kube-ipvs/kube-ipvs/manifests"
)

// kubeadm's kube-proxy ConfigMap and DaemonSet (internal/config/testdata,
// written by scripts/kubeadm-testdata.sh): the conventions ours follows.
const kubeadmObjects = "../../internal/config/testdata/kubeadm-v1.37.2-kube-proxy.yaml"

func shipped(t *testing.T) (manifests.Objects, corev1.PodSpec, corev1.Container) {
	t.Helper()
	o, err := manifests.Decode(manifests.KubeIPVS)
	if err != nil {
		t.Fatalf("manifests/kube-ipvs.yaml: %v", err)
	}
	if o.ServiceAccount == nil || o.ClusterRole == nil || o.ClusterRoleBinding == nil || o.DaemonSet == nil {
		t.Fatalf("manifests/kube-ipvs.yaml: want a ServiceAccount, ClusterRole, ClusterRoleBinding and DaemonSet, got %+v", o)
	}
	spec := o.DaemonSet.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("DaemonSet: %d containers, want 1", len(spec.Containers))
	}
	return o, spec, spec.Containers[0]
}

func kubeadmKubeProxy(t *testing.T) (*corev1.ConfigMap, *appsv1.DaemonSet) {
	t.Helper()
	data, err := os.ReadFile(kubeadmObjects)
	if err != nil {
		t.Fatal(err)
	}
	docs := manifests.Documents(data)
	if len(docs) != 2 {
		t.Fatalf("%s: %d documents, want the ConfigMap and the DaemonSet", kubeadmObjects, len(docs))
	}
	var cm corev1.ConfigMap
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(docs[0], &cm); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(docs[1], &ds); err != nil {
		t.Fatal(err)
	}
	return &cm, &ds
}

// The DaemonSet keeps kube-proxy's conventions, read from the DaemonSet
// kubeadm v1.37 creates, not from a list of our own: the node selector,
// priority, tolerations, host network, privilege, the command line after
// the binary, NODE_NAME, and every volume mounted where and as kube-proxy
// mounts it (the kube-proxy ConfigMap, /run/xtables.lock, /lib/modules).
func TestDaemonSetFollowsKubeProxy(t *testing.T) {
	_, spec, c := shipped(t)
	_, kp := kubeadmKubeProxy(t)
	kspec, kc := kp.Spec.Template.Spec, kp.Spec.Template.Spec.Containers[0]

	same := func(what string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, kube-proxy's is %+v", what, got, want)
		}
	}
	same("nodeSelector", spec.NodeSelector, kspec.NodeSelector)
	same("priorityClassName", spec.PriorityClassName, kspec.PriorityClassName)
	same("tolerations", spec.Tolerations, kspec.Tolerations)
	same("hostNetwork", spec.HostNetwork, kspec.HostNetwork)
	same("securityContext", c.SecurityContext, kc.SecurityContext)
	same("env", c.Env, kc.Env)
	// Our image's entrypoint is the kube-ipvs binary; kube-proxy's command
	// names its own. What follows must be the same.
	if len(c.Command) != 0 || len(c.Args) == 0 || c.Args[0] != "agent" {
		t.Fatalf("container: command %q args %q, want the image's entrypoint with args [agent ...]", c.Command, c.Args)
	}
	same("args after agent", c.Args[1:], kc.Command[1:])

	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	for _, kv := range kspec.Volumes {
		km := mountOf(t, kc, kv.Name)
		v, ok := volumeLike(spec.Volumes, kv)
		if !ok {
			t.Errorf("no volume like kube-proxy's %s (%+v)", kv.Name, kv.VolumeSource)
			continue
		}
		m, ok := mounts[v.Name]
		if !ok {
			t.Errorf("volume %s is not mounted", v.Name)
			continue
		}
		if m.MountPath != km.MountPath || m.ReadOnly != km.ReadOnly {
			t.Errorf("volume %s mounted at %s (read-only %v), kube-proxy mounts it at %s (read-only %v)", v.Name, m.MountPath, m.ReadOnly, km.MountPath, km.ReadOnly)
		}
	}
}

func mountOf(t *testing.T, c corev1.Container, volume string) corev1.VolumeMount {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return m
		}
	}
	t.Fatalf("kube-proxy's container does not mount %s", volume)
	return corev1.VolumeMount{}
}

// volumeLike finds the volume with the same source as want (names may differ).
func volumeLike(vs []corev1.Volume, want corev1.Volume) (corev1.Volume, bool) {
	for _, v := range vs {
		if reflect.DeepEqual(v.VolumeSource, want.VolumeSource) {
			return v, true
		}
	}
	return corev1.Volume{}, false
}

// What kube-proxy's DaemonSet lacks and ours has: probes on the health
// port kube-proxy's configuration defaults to, resource requests, and a
// service account bound to the narrow ClusterRole.
func TestDaemonSetProbesResourcesIdentity(t *testing.T) {
	o, spec, c := shipped(t)
	_, port, err := splitHostPort(config.DefaultKubeProxy().HealthzBindAddress)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"livenessProbe", c.LivenessProbe, "/livez"}, {"readinessProbe", c.ReadinessProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s: want an HTTP GET of %s on %d", p.name, p.path, port)
			continue
		}
		if g := p.probe.HTTPGet; g.Path != p.path || g.Port.IntValue() != int(port) {
			t.Errorf("%s: GET %s on %s, want %s on %d (healthzBindAddress)", p.name, g.Path, g.Port.String(), p.path, port)
		}
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := c.Resources.Requests[r]; !ok || q.IsZero() {
			t.Errorf("resources.requests.%s unset: the scheduler must reserve what the agent needs", r)
		}
	}
	if spec.ServiceAccountName != o.ServiceAccount.Name || o.DaemonSet.Namespace != o.ServiceAccount.Namespace {
		t.Errorf("serviceAccountName %q in %s, want the manifest's ServiceAccount %s/%s", spec.ServiceAccountName, o.DaemonSet.Namespace, o.ServiceAccount.Namespace, o.ServiceAccount.Name)
	}
	b := o.ClusterRoleBinding
	want := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: o.ServiceAccount.Name, Namespace: o.ServiceAccount.Namespace}
	if b.RoleRef.Name != o.ClusterRole.Name || !slices.Contains(b.Subjects, want) {
		t.Errorf("ClusterRoleBinding binds %v to %s, want %v to %s", b.Subjects, b.RoleRef.Name, want, o.ClusterRole.Name)
	}
}

func splitHostPort(s string) (netip.Addr, uint16, error) {
	ap, err := netip.ParseAddrPort(s)
	return ap.Addr(), ap.Port(), err
}

// The ClusterRole stays narrow: these rules exactly. Reading the kube-proxy
// ConfigMap is a volume, done by the kubelet: the agent needs no access to
// ConfigMaps (nor Secrets, nor any write but Events).
func TestClusterRoleIsNarrow(t *testing.T) {
	o, _, _ := shipped(t)
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services", "nodes"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
	}
	if !reflect.DeepEqual(o.ClusterRole.Rules, want) {
		t.Errorf("ClusterRole rules\n got %+v\nwant %+v", o.ClusterRole.Rules, want)
	}
}

// The DaemonSet's command line, with kubeadm's kube-proxy ConfigMap where
// the volume puts it, is a valid agent configuration that reaches the API
// server through the kubeconfig in that ConfigMap: never in-cluster, which
// would go through the kubernetes Service's ClusterIP.
func TestDaemonSetArgsReadTheConfigMap(t *testing.T) {
	_, spec, c := shipped(t)
	cm, _ := kubeadmKubeProxy(t)
	mount := configMapMount(t, spec, c, "kube-proxy")
	dir := t.TempDir()
	for name, data := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env, err := manifests.Env(c, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	args := manifests.Expand(c.Args[1:], env)
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, mount+"/", dir+"/")
	}
	o, code := parseAgent(args, io.Discard, io.Discard)
	if code >= 0 {
		t.Fatalf("agent %q: exit %d", args, code)
	}
	if o.HostnameOverride != "node-a" {
		t.Errorf("hostname override %q, want $(NODE_NAME) resolved to node-a", o.HostnameOverride)
	}
	if o.ProxyMode != config.ProxyModeIPVS {
		t.Errorf("proxy mode %q, want ipvs", o.ProxyMode)
	}
	rel, ok := strings.CutPrefix(o.Kubeconfig, mount+"/")
	if !ok || cm.Data[rel] == "" {
		t.Fatalf("kubeconfig %q, want a file of the kube-proxy ConfigMap under %s", o.Kubeconfig, mount)
	}
	kc, err := clientcmd.Load([]byte(cm.Data[rel]))
	if err != nil {
		t.Fatal(err)
	}
	server := kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster].Server
	if server != "https://192.0.2.10:6443" {
		t.Errorf("API server %q, want kubeadm's controlPlaneEndpoint", server)
	}
}

func configMapMount(t *testing.T, spec corev1.PodSpec, c corev1.Container, name string) string {
	t.Helper()
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == name {
			return mountOf(t, c, v.Name).MountPath
		}
	}
	t.Fatalf("no volume of ConfigMap %s", name)
	return ""
}

// The ConfigMap for clusters without kubeadm has kubeadm's shape: the same
// keys, a config file the agent accepts, and a kubeconfig that
// authenticates with the pod's service-account token and CA as kubeadm's
// does, at an address written in (not the ClusterIP).
func TestKubeProxyConfigMapWithoutKubeadm(t *testing.T) {
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(manifests.KubeProxyConfigMap, &cm); err != nil {
		t.Fatal(err)
	}
	kcm, _ := kubeadmKubeProxy(t)
	if cm.Name != kcm.Name || cm.Namespace != kcm.Namespace || !reflect.DeepEqual(keys(cm.Data), keys(kcm.Data)) {
		t.Fatalf("ConfigMap %s/%s with %v, want kubeadm's %s/%s with %v", cm.Namespace, cm.Name, keys(cm.Data), kcm.Namespace, kcm.Name, keys(kcm.Data))
	}
	kp, _, err := config.DecodeKubeProxy([]byte(cm.Data["config.conf"]))
	if err != nil {
		t.Fatalf("config.conf: %v", err)
	}
	c := config.Default()
	if _, err := kp.ApplyTo(&c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("config.conf: %v", err)
	}
	if c.Kubeconfig != "/var/lib/kube-proxy/kubeconfig.conf" {
		t.Errorf("clientConnection.kubeconfig %q, want the kubeconfig.conf beside it", c.Kubeconfig)
	}
	ours, err := clientcmd.Load([]byte(cm.Data["kubeconfig.conf"]))
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := clientcmd.Load([]byte(kcm.Data["kubeconfig.conf"]))
	if err != nil {
		t.Fatal(err)
	}
	oc, tc := ours.Clusters["default"], theirs.Clusters["default"]
	if oc == nil || tc == nil || oc.CertificateAuthority != tc.CertificateAuthority || oc.Server == tc.Server {
		t.Errorf("cluster %+v, want kubeadm's CA file and an address of its own", oc)
	}
	if !reflect.DeepEqual(ours.AuthInfos, theirs.AuthInfos) || !reflect.DeepEqual(ours.Contexts, theirs.Contexts) {
		t.Errorf("users %v contexts %v, want kubeadm's", ours.AuthInfos, ours.Contexts)
	}
}

func keys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

// Migration (docs/migration.md): whatever a node's kube-ipvs.io/proxy
// label says, at most one of the two runs there, and an unlabelled node
// (a new one, or a cluster that never ran kube-proxy) runs kube-ipvs. The
// kube-proxy side is kubeadm's DaemonSet with the shipped patch, as kubeadm
// itself applies it.
func TestMigrationLabelsNeverRunBoth(t *testing.T) {
	o, _, _ := shipped(t)
	data, err := os.ReadFile("../../internal/config/testdata/kubeadm-v1.37.2-kube-proxy-patched.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var kp appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(data, &kp); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		label               string // "" is no label
		kubeIPVS, kubeProxy bool
	}{
		{"", true, false},
		{"kube-proxy", false, true},
		{"none", false, false},
		{"kube-ipvs", true, false},
	} {
		labels := map[string]string{"kubernetes.io/os": "linux"}
		if tc.label != "" {
			labels["kube-ipvs.io/proxy"] = tc.label
		}
		if got := runsOn(t, o.DaemonSet.Spec.Template.Spec, labels); got != tc.kubeIPVS {
			t.Errorf("label %q: kube-ipvs runs %v, want %v", tc.label, got, tc.kubeIPVS)
		}
		if got := runsOn(t, kp.Spec.Template.Spec, labels); got != tc.kubeProxy {
			t.Errorf("label %q: kube-proxy runs %v, want %v", tc.label, got, tc.kubeProxy)
		}
	}
}

// runsOn: does a pod of spec fit a node with these labels (nodeSelector
// and required node affinity; In, NotIn, Exists, DoesNotExist)?
func runsOn(t *testing.T, spec corev1.PodSpec, labels map[string]string) bool {
	t.Helper()
	for k, v := range spec.NodeSelector {
		if labels[k] != v {
			return false
		}
	}
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	for _, term := range spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if termMatches(t, term, labels) {
			return true
		}
	}
	return false
}

func termMatches(t *testing.T, term corev1.NodeSelectorTerm, labels map[string]string) bool {
	t.Helper()
	for _, e := range term.MatchExpressions {
		v, has := labels[e.Key]
		var ok bool
		switch e.Operator {
		case corev1.NodeSelectorOpIn:
			ok = has && slices.Contains(e.Values, v)
		case corev1.NodeSelectorOpNotIn:
			ok = !has || !slices.Contains(e.Values, v)
		case corev1.NodeSelectorOpExists:
			ok = has
		case corev1.NodeSelectorOpDoesNotExist:
			ok = !has
		default:
			t.Fatalf("operator %s: not evaluated by this test", e.Operator)
		}
		if !ok {
			return false
		}
	}
	return len(term.MatchFields) == 0
}

// The config.conf kubeadm-v1.37.2-ipvs.conf holds is the ConfigMap's.
func TestKubeadmTestdataAgree(t *testing.T) {
	cm, _ := kubeadmKubeProxy(t)
	data, err := os.ReadFile("../../internal/config/testdata/kubeadm-v1.37.2-ipvs.conf")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(data)) != strings.TrimSpace(cm.Data["config.conf"]) {
		t.Errorf("kubeadm-v1.37.2-ipvs.conf differs from the config.conf of %s: rerun scripts/kubeadm-testdata.sh", kubeadmObjects)
	}
}
