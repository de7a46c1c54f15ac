package cluster

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/kube-ipvs/kube-ipvs/manifests"
)

// The agent is started in the VM as the shipped DaemonSet starts it on a
// fresh node: the image's entrypoint with the container's args (its $(VAR)
// references resolved as the kubelet does), its env, the kube-proxy
// ConfigMap kubeadm writes (internal/config/testdata) at the volume's mount
// path, the pod's service-account files, and KUBERNETES_SERVICE_HOST/PORT
// naming the kubernetes Service's ClusterIP, which nothing serves yet: the
// IPVS table is empty and only the agent can program it.

const (
	kubeadmKubeProxy = "internal/config/testdata/kubeadm-v1.37.2-kube-proxy.yaml"
	saDir            = "/var/run/secrets/kubernetes.io/serviceaccount"
	entrypoint       = "/usr/local/bin/kube-ipvs" // the image's (Dockerfile, scripts/image.sh)
	// The self-signed serving certificate kube-apiserver makes names the
	// Service's ClusterIP and "kubernetes", not the address the guest
	// reaches it at: kubeconfig.conf says which name to expect.
	apiServerName = "kubernetes"
)

// pod is what the DaemonSet's pod would see, as files and variables.
type pod struct {
	args   []string          // the container's process, entrypoint first
	env    map[string]string // its environment
	adds   []string          // HOST:GUEST files for scripts/vm/run.sh --add
	server string            // the API server kubeconfig.conf names
}

// daemonSetPod prepares, in dir, the files of the shipped DaemonSet's pod
// on nodeName, reaching the API server at server.
func daemonSetPod(ctx context.Context, t *testing.T, e env, admin kubernetes.Interface, dir, server string) pod {
	t.Helper()
	objs, err := manifests.Decode(manifests.KubeIPVS)
	if err != nil {
		t.Fatalf("manifests/kube-ipvs.yaml: %v", err)
	}
	spec := objs.DaemonSet.Spec.Template.Spec
	c := spec.Containers[0]
	if len(c.Command) != 0 {
		t.Fatalf("the container overrides the image's entrypoint (%q): this test runs %s", c.Command, entrypoint)
	}
	env, err := manifests.Env(c, nodeName)
	if err != nil {
		t.Fatal(err)
	}
	p := pod{args: append([]string{entrypoint}, manifests.Expand(c.Args, env)...), env: env, server: server}

	// The kubernetes Service's ClusterIP, as the kubelet sets it in every pod.
	k, err := admin.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Service kubernetes: %v", err)
	}
	p.env["KUBERNETES_SERVICE_HOST"] = k.Spec.ClusterIP
	p.env["KUBERNETES_SERVICE_PORT"] = fmt.Sprint(k.Spec.Ports[0].Port)

	for name, data := range kubeProxyConfigMap(t, e, server) {
		p.add(t, dir, mountPathOf(t, spec, c, "kube-proxy")+"/"+name, data)
	}
	token, ca := agentCredentials(t, e)
	p.add(t, dir, saDir+"/token", token)
	p.add(t, dir, saDir+"/ca.crt", ca)
	p.add(t, dir, saDir+"/namespace", objs.DaemonSet.Namespace)
	return p
}

// add writes data to a host file that the VM gets at guest.
func (p *pod) add(t *testing.T, dir, guest, data string) {
	t.Helper()
	host := filepath.Join(dir, strings.ReplaceAll(strings.TrimPrefix(guest, "/"), "/", "_"))
	if err := os.WriteFile(host, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	p.adds = append(p.adds, host+":"+guest)
}

// exports set the container's environment in the guest shell.
func (p pod) exports() string {
	var b strings.Builder
	for k, v := range p.env {
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(v))
	}
	return b.String()
}

// command is the container's process as one guest shell line.
func (p pod) command() string {
	q := make([]string, len(p.args))
	for i, a := range p.args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func mountPathOf(t *testing.T, spec corev1.PodSpec, c corev1.Container, configMap string) string {
	t.Helper()
	for _, v := range spec.Volumes {
		if v.ConfigMap == nil || v.ConfigMap.Name != configMap {
			continue
		}
		for _, m := range c.VolumeMounts {
			if m.Name == v.Name {
				return m.MountPath
			}
		}
	}
	t.Fatalf("the DaemonSet mounts no ConfigMap %s", configMap)
	return ""
}

// kubeProxyConfigMap is kubeadm's kube-proxy ConfigMap: config.conf as
// kubeadm wrote it, kubeconfig.conf with the control-plane address this
// VM reaches (kubeadm's is 192.0.2.10) and the name the API server's
// certificate carries.
func kubeProxyConfigMap(t *testing.T, e env, server string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.root, kubeadmKubeProxy))
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal(manifests.Documents(data)[0], &cm); err != nil || cm.Kind != "ConfigMap" {
		t.Fatalf("%s: want the ConfigMap first: %v", kubeadmKubeProxy, err)
	}
	kc, err := clientcmd.Load([]byte(cm.Data["kubeconfig.conf"]))
	if err != nil {
		t.Fatalf("kubeadm's kubeconfig.conf: %v", err)
	}
	for _, cl := range kc.Clusters {
		cl.Server, cl.TLSServerName = server, apiServerName
	}
	out, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["kubeconfig.conf"] = string(out)
	return cm.Data
}

// agentCredentials are what the kubelet would put in the pod's
// service-account folder: a token for kube-system/kube-ipvs (run.sh's
// static token for that identity) and the CA that signed the API server's
// certificate (read from its TLS handshake: it serves its chain).
func agentCredentials(t *testing.T, e env) (token, ca string) {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(e.agentHostKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range kc.AuthInfos {
		token = a.Token
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp",
		"127.0.0.1:"+os.Getenv("KUBE_IPVS_APISERVER_PORT"), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("TLS handshake with the API server: %v", err)
	}
	defer conn.Close()
	for _, cert := range conn.ConnectionState().PeerCertificates {
		if cert.IsCA {
			ca = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))
		}
	}
	if token == "" || ca == "" {
		t.Fatalf("want the agent's token and the API server's CA (token %v, CA %v)", token != "", ca != "")
	}
	return token, ca
}

// kubernetesSlice is the kubernetes Service's EndpointSlice, pointing at
// the API server where the guest reaches it (run.sh's API server runs with
// --endpoint-reconciler-type=none, so nothing else writes it).
func kubernetesSlice(ctx context.Context, t *testing.T, admin kubernetes.Interface, host string, port int32) {
	t.Helper()
	name, proto, ready := "https", corev1.ProtocolTCP, true
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "kubernetes", Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Protocol: &proto, Port: &port}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}
	if _, err := admin.DiscoveryV1().EndpointSlices("default").Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the kubernetes EndpointSlice: %v", err)
	}
}

// inClusterTry is an agent process that reaches the API server the way
// any pod does, in-cluster through the kubernetes Service's ClusterIP
// (--once --dry-run: it only reads, and prints what it would change).
const inClusterTry = entrypoint + " agent --once --dry-run --hostname-override " + nodeName

// daemonSetGuest is the guest script: the IPVS table before anything ran;
// the in-cluster try, which must fail there, as the agent would have on a
// fresh node had it used the in-cluster configuration; the agent started
// as the DaemonSet starts it; and once the agent has programmed the
// kubernetes Service, the in-cluster try again, which must now succeed.
func daemonSetGuest(p pod) string {
	vip := p.env["KUBERNETES_SERVICE_HOST"] + ":" + p.env["KUBERNETES_SERVICE_PORT"]
	return `set -u
echo "cluster-vm: guest up"
echo "ipvs-before: $(ipvsadm -Sn | tr '\n' ';')"
` + p.exports() + `timeout 8 ` + inClusterTry + ` >/tmp/before.log 2>&1
rc=$?
while IFS= read -r l; do echo "in-cluster-before| $l"; done </tmp/before.log
echo "in-cluster-before-exit: $rc"
( ` + p.command() + ` 2>&1 & echo $! >/tmp/agent.pid; wait $!; echo "agent exited: $?" ) |
  while IFS= read -r l; do echo "agent| $l"; done &
(
  until ipvsadm -Sn | grep -q -- "-A -t ` + vip + ` "; do sleep 0.5; done
  ` + inClusterTry + ` >/tmp/in-cluster.log 2>&1
  rc=$?
  while IFS= read -r l; do echo "in-cluster| $l"; done </tmp/in-cluster.log
  echo "in-cluster-exit: $rc"
) &
` + healthzLoop + snapshotLoop + metricsDump + compareKubeadm
}

// The kubeadm comparison in the VM, after the scenario: the agent stopped,
// the kernel cleaned and its IPVS timeouts and ARP settings put back, then
// one sync (--once) with kubeadm's tuned config.conf, and the same from
// clean with the equivalent flags (internal/config/testdata). Each prints
// the kernel it left: ipvsadm -Sn, the IPVS timeouts, arp_ignore, and the
// shim's nat rules.
const (
	tunedConf      = "/etc/kube-ipvs/kubeadm-tuned.conf"
	compareKubeadm = `kill "$(cat /tmp/agent.pid)"
while kill -0 "$(cat /tmp/agent.pid)" 2>/dev/null; do sleep 0.2; done
kernel() {
  echo "$(ipvsadm -Sn | sort | tr '\n' ';')|$(ipvsadm -L --timeout)|arp_ignore=$(cat /proc/sys/net/ipv4/conf/all/arp_ignore)|$(iptables-save -t nat | grep -- '-A KUBE-IPVS' | sort | tr '\n' ';')"
}
fresh() {
  kube-ipvs cleanup >/dev/null 2>&1
  ipvsadm --set 900 120 300
  echo 0 >/proc/sys/net/ipv4/conf/all/arp_ignore
}
fresh
kube-ipvs agent --config=` + tunedConf + ` --hostname-override=` + nodeName + ` --once >/tmp/file.log 2>&1
echo "kubeadm-file: exit $?|$(kernel)"
fresh
kube-ipvs agent $(cat /etc/kube-ipvs/kubeadm-tuned.flags) --hostname-override=` + nodeName + ` --once >/tmp/flags.log 2>&1
echo "kubeadm-flags: exit $?|$(kernel)"
`
)

// tunedFiles are the host files compareKubeadm needs, for --add.
func tunedFiles(e env) []string {
	dir := filepath.Join(e.root, "internal", "config", "testdata")
	return []string{
		filepath.Join(dir, "kubeadm-v1.37.2-ipvs-tuned.conf") + ":" + tunedConf,
		filepath.Join(dir, "kubeadm-v1.37.2-ipvs-tuned.flags") + ":/etc/kube-ipvs/kubeadm-tuned.flags",
	}
}

// checkKubeadmCompare: kubeadm's tuned file and its flags left the same
// kernel, and it is the tuned one (scheduler, timeouts, strict ARP,
// masquerade-all), not the defaults.
func checkKubeadmCompare(ctx context.Context, t *testing.T, con *Console) {
	t.Helper()
	file, err := con.WaitLine(ctx, "kubeadm-file: ")
	if err != nil {
		t.Fatal(err)
	}
	flags, err := con.WaitLine(ctx, "kubeadm-flags: ")
	if err != nil {
		t.Fatal(err)
	}
	show := strings.NewReplacer(";", "\n  ", "|", "\n")
	t.Logf("kernel after --once with kubeadm's tuned config.conf:\n%s", show.Replace(file))
	if file != flags {
		t.Errorf("kubeadm's file and the same settings as flags left different kernels\nfile:\n%s\nflags:\n%s", show.Replace(file), show.Replace(flags))
	}
	for _, want := range []string{"exit 0|", "-A -t 10.96.10.10:80 -s lc", "600 30 60", "arp_ignore=1", "-A KUBE-IPVS"} {
		if !strings.Contains(file, want) {
			t.Errorf("kernel after kubeadm's tuned file lacks %q:\n%s", want, show.Replace(file))
		}
	}
}

// checkInClusterBefore: before the agent ran, the in-cluster try started
// and never got the cluster's state within its 8 s (the agent itself gets
// it in about one through kubeconfig.conf): nothing answers the ClusterIP
// on a fresh node, the dial hangs.
func checkInClusterBefore(ctx context.Context, t *testing.T, con *Console) {
	t.Helper()
	rc, err := con.WaitLine(ctx, "in-cluster-before-exit: ")
	out := prefixed(con, "in-cluster-before| ")
	if err != nil || rc == "0" || !strings.Contains(out, "starting") || strings.Contains(out, "source synced") {
		t.Fatalf("in-cluster client before the agent ran: exit %q (%v), want it started and stopped without the cluster's state:\n%s", rc, err, out)
	}
	t.Logf("in-cluster client before the agent ran: exit %s, as on a fresh node:\n%s", rc, out)
}

// prefixed is the console lines after prefix, joined.
func prefixed(con *Console, prefix string) string {
	var out []string
	for _, l := range con.Tail(1 << 20) {
		if i := strings.Index(l, prefix); i >= 0 {
			out = append(out, l[i+len(prefix):])
		}
	}
	return strings.Join(out, "\n")
}

// checkInCluster: once the agent has programmed the kubernetes Service, a
// process using the in-cluster configuration, as every pod does, reaches
// the API server through the ClusterIP and lists what the agent lists.
func checkInCluster(ctx context.Context, t *testing.T, con *Console) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	rc, err := con.WaitLine(wctx, "in-cluster-exit: ")
	out := prefixed(con, "in-cluster| ")
	if err != nil || rc != "0" {
		t.Fatalf("in-cluster client through the kubernetes ClusterIP: exit %q (%v):\n%s", rc, err, out)
	}
	t.Logf("in-cluster client through the kubernetes ClusterIP: exit 0, its output:\n%s", out)
}
