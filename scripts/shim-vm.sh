#!/usr/bin/env bash
# shim-vm.sh: the netfilter shim and the node-level behaviour around it, with
# real traffic through real IPVS in a throwaway VM (scripts/vm/run.sh).
# Network namespaces stand for pods and outside clients; the VM is node-a
# (manifests: scripts/testdata/shim). Checked:
#   - the node itself reaches a ClusterIP (masqueraded: source is the VIP);
#   - a pod reaches itself through its Service (hairpin);
#   - an outside client reaches a NodePort: Cluster policy masqueraded,
#     Local policy keeps the client's address; health-check ports 200/503;
#   - loadBalancerSourceRanges: an allowed client is served, another dropped;
#     0.0.0.0/0 lets every client in and leaves no firewall member;
#   - a Service without endpoints is refused at once (TCP reset);
#   - a host socket (sshd-like, 0.0.0.0:22) is refused through a ClusterIP
#     and an external IP while their Service ports serve; health-check
#     ports answer on the node address and not on a VIP;
#   - strict ARP sysctls; rules written once per family, not on resyncs;
#   - `cleanup` with no flags removes every virtual server the agent made,
#     NodePorts included, even once the node address they are on is gone;
#   - `cleanup --kube-proxy` removes the shim and kube-proxy-shaped leftovers.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for pkg in ./cmd/kube-ipvs ./e2e/tools/echo ./e2e/tools/probe; do
  (cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$work/$(basename "$pkg")" "$pkg")
done
mv "$work/echo" "$work/echo-server"

cat >"$work/guest.sh" <<'GUEST'
set -u
IP=iproute2-ip
failed=0
dmesg -n 1 2>/dev/null
ok() { echo "shim-vm: ok: $*"; }
bad() { echo "shim-vm: FAIL: $*"; failed=1; }
die() { echo "shim-vm: FAIL: $*"; echo "--- agent log"; tail -n 40 /tmp/agent.log; exit 1; }
wait_for() { n=$(($1 * 5)); shift; while [ "$n" -gt 0 ]; do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; n=$((n - 1)); done; return 1; }
# netns NAME ADDR NODEADDR: a namespace on a veth, default route via the node.
netns() {
  $IP netns add "$1" &&
    $IP link add "v-$1" type veth peer name eth0 netns "$1" &&
    $IP addr add "$3/32" dev "v-$1" && $IP link set "v-$1" up &&
    $IP route add "$2/32" dev "v-$1" src "$3" &&
    $IP -n "$1" link set lo up && $IP -n "$1" addr add "$2/32" dev eth0 && $IP -n "$1" link set eth0 up &&
    $IP -n "$1" route add "$3/32" dev eth0 scope link && $IP -n "$1" route add default via "$3" dev eth0
}
in_ns() { ns=$1; shift; $IP netns exec "$ns" "$@"; }
# greeting NS ADDR PORT: the echo server's first line ("NAME from PEER").
greeting() { in_ns "$1" nc -w 2 "$2" "$3" </dev/null 2>/dev/null | head -n 1; }
# http_status NS ADDR PORT: status code and body of GET /.
http_get() { printf 'GET / HTTP/1.0\r\n\r\n' | in_ns "$1" nc -w 2 "$2" "$3" 2>/dev/null; }

netns pod-a 10.244.1.2 10.244.1.1 || die "namespace pod-a"
netns pod-b 10.244.2.2 10.244.2.1 || die "namespace pod-b"
netns ext 192.168.50.2 192.168.50.1 || die "namespace ext"
netns allowed 198.51.100.2 198.51.100.1 || die "namespace allowed"
netns blocked 203.0.113.2 203.0.113.1 || die "namespace blocked"
in_ns pod-a echo-server -name pod-a -tcp :8080 >/tmp/pod-a.log 2>&1 &
in_ns pod-b echo-server -name pod-b -tcp :8080 >/tmp/pod-b.log 2>&1 &
# A host socket on every address, as sshd listens: no VIP may reach it.
echo-server -name node-sshd -tcp :22 >/tmp/sshd.log 2>&1 &
wait_for 20 probe -tcp 10.244.1.2:8080 -n 1 || die "pod-a does not answer"
wait_for 20 probe -tcp 10.244.2.2:8080 -n 1 || die "pod-b does not answer"

# kube-proxy IPVS-mode leftovers a migrating node would have.
ipset create KUBE-CLUSTER-IP hash:ip,port && ipset add KUBE-CLUSTER-IP 10.96.0.1,tcp:443
iptables -t nat -N KUBE-SERVICES && iptables -t nat -A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
iptables -t nat -A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT

kube-ipvs agent --manifests /manifests --hostname-override node-a --ipvs-strict-arp --ipvs-sync-period 2s \
  --nodeport-addresses primary --log-level info >/tmp/agent.log 2>&1 &
agent=$!
wait_for 60 sh -c 'ipvsadm -Ln | grep -q "192.0.2.10:80"' || die "no virtual server for the LB after 60s"
wait_for 10 sh -c 'ipset list KUBE-IPVS-LB-SOURCE-CIDR | grep -q 198.51.100.0/24' || die "source range member missing"
sleep 1
echo "--- ipvsadm -Ln"; ipvsadm -Ln
echo "--- iptables-save (our chains)"; iptables-save | grep KUBE-IPVS
echo "--- ipset members"; ipset list | grep -E '^Name|^[0-9]'

[ "$(cat /proc/sys/net/ipv4/conf/all/arp_ignore)$(cat /proc/sys/net/ipv4/conf/all/arp_announce)" = 12 ] \
  && ok "strict ARP: arp_ignore=1 arp_announce=2" || bad "strict ARP sysctls not set"

out=$(probe -tcp 10.96.0.100:80 -n 4); rc=$?
case "$rc $(echo "$out" | tail -n 1)" in
"0 pod-a="*" pod-b="*" failures=0") ok "the node reaches a ClusterIP: $(echo "$out" | tail -n 1)" ;;
*) bad "node -> ClusterIP: $out" ;;
esac

out=$(in_ns pod-a probe -tcp 10.96.0.100:80 -n 6); rc=$?
case "$rc $(echo "$out" | tail -n 1)" in
"0 pod-a="*" pod-b="*" failures=0") ok "pod-a reaches itself through its Service (hairpin): $(echo "$out" | tail -n 1)" ;;
*) bad "hairpin: $out" ;;
esac

g=$(greeting ext 192.168.50.1 30080)
case "$g" in
"pod-a from 10.244.1.1:"*) ok "NodePort, Cluster policy, from outside: served, masqueraded ($g)" ;;
*) bad "NodePort Cluster policy: got '$g'" ;;
esac
g=$(greeting ext 192.168.50.1 30081)
case "$g" in
"pod-a from 192.168.50.2:"*) ok "NodePort, Local policy, from outside: the backend sees the client ($g)" ;;
*) bad "NodePort Local policy: got '$g'" ;;
esac
h=$(http_get ext 192.168.50.1 32001)
case "$h" in
*" 200 OK"*'"localEndpoints":1'*) ok "health check 32001 (local endpoint): 200, $(echo "$h" | tail -n 1)" ;;
*) bad "health check 32001: $h" ;;
esac
h=$(http_get ext 192.168.50.1 32002)
case "$h" in
*" 503 "*'"localEndpoints":0'*) ok "health check 32002 (no local endpoint): 503, $(echo "$h" | tail -n 1)" ;;
*) bad "health check 32002: $h" ;;
esac

out=$(in_ns allowed probe -tcp 192.0.2.10:80 -n 3); rc=$?
[ "$rc" = 0 ] && ok "source range: 198.51.100.2 served ($(echo "$out" | tail -n 1))" || bad "allowed client: $out"
t0=$(date +%s)
out=$(in_ns blocked probe -tcp 192.0.2.10:80 -n 1 -timeout 2s); rc=$?
case "$rc $out" in
*timeout*) ok "source range: 203.0.113.2 dropped ($(echo "$out" | head -n 1))" ;;
*) bad "blocked client: rc=$rc $out" ;;
esac

out=$(in_ns blocked probe -tcp 192.0.2.11:80 -n 3 -timeout 2s); rc=$?
[ "$rc" = 0 ] && ok "allow-all source range: 203.0.113.2 served ($(echo "$out" | tail -n 1))" || bad "allow-all range, client: $out"
m=$( (ipset list KUBE-IPVS-LB-FW; ipset list KUBE-IPVS-LB-SOURCE-CIDR) | grep -E '^192\.0\.2\.11,'; ipset list | grep -E '/0$')
[ -z "$m" ] && ok "allow-all source range: no firewall or /0 member" || bad "allow-all range left members: $m"

t0=$(date +%s)
out=$(in_ns ext probe -tcp 10.96.0.200:80 -n 3 -timeout 3s); rc=$?
dt=$(($(date +%s) - t0))
case "$rc $out" in
*refused*) [ "$dt" -le 2 ] && ok "no endpoints: refused at once, 3 tries in ${dt}s ($(echo "$out" | head -n 1))" \
  || bad "no endpoints: refused but slowly (${dt}s)" ;;
*) bad "no endpoints: rc=$rc $out" ;;
esac
out=$(probe -tcp 10.96.0.200:80 -n 1 -timeout 3s)
case "$out" in *refused*) ok "no endpoints, from the node: refused" ;; *) bad "no endpoints from the node: $out" ;; esac

# Host ports through a VIP. The control: the sshd-like listener answers on
# the node address, so a refusal through a VIP is the filter's doing.
g=$(greeting ext 192.168.50.1 22)
case "$g" in "node-sshd from "*) ok "control: the host's :22 answers on the node address ($g)" ;; *) bad "host :22 on the node address: '$g'" ;; esac
for t in "ext 10.96.0.100 ClusterIP" "ext 192.0.2.20 external-IP" "pod-a 10.96.0.100 ClusterIP-from-a-pod"; do
  set -- $t
  out=$(in_ns "$1" probe -tcp "$2:22" -n 1 -timeout 2s)
  case "$out" in
  *refused*) ok "host :22 through the $3 $2 from $1: refused" ;;
  *) bad "host :22 through the $3 $2 from $1: $out" ;;
  esac
done
out=$(in_ns ext probe -tcp 192.0.2.20:80 -n 4); rc=$?
case "$rc $(echo "$out" | tail -n 1)" in
"0 "*"failures=0") ok "the external IP's Service port still serves: $(echo "$out" | tail -n 1)" ;;
*) bad "external IP 192.0.2.20:80: $out" ;;
esac
out=$(in_ns ext probe -tcp 10.96.0.102:32001 -n 1 -timeout 2s)
case "$out" in
*refused*) ok "health check 32001 through a VIP (10.96.0.102): refused" ;;
*) bad "health check port answered through a VIP: $out" ;;
esac

sleep 5 # at least two resyncs (--ipvs-sync-period 2s)
n=$(grep -c 'sync failed' /tmp/agent.log)
[ "$n" = 0 ] && ok "no sync failed" || bad "$n syncs failed: $(grep 'sync failed' /tmp/agent.log | tail -n 1)"
n=$(grep -c 'iptables rules written' /tmp/agent.log)
[ "$n" = 2 ] && ok "rules written once per family (2), not again on resyncs every 2s" \
  || bad "rules written $n times (want 2: IPv4 and IPv6)"

# Drift: without our POSTROUTING rules hairpin breaks; the next resync
# rewrites them (one restore) and it works again. The agent is paused
# during the control probe: a resync every 2s could otherwise repair the
# rules half-way through it.
kill -STOP "$agent"
iptables -t nat -F KUBE-IPVS-POSTROUTING
out=$(in_ns pod-a probe -tcp 10.96.0.100:80 -n 4 -timeout 500ms)
kill -CONT "$agent"
case "$out" in *pod-a=*) bad "hairpin worked without the masquerade rules: $out" ;;
*) ok "control: without the POSTROUTING rules pod-a cannot reach itself ($(echo "$out" | tail -n 1))" ;; esac
wait_for 10 sh -c 'iptables-save -t nat | grep -q "^-A KUBE-IPVS-POSTROUTING -j MASQUERADE"' || bad "rules not repaired"
out=$(in_ns pod-a probe -tcp 10.96.0.100:80 -n 4)
case "$out" in *pod-a=*failures=0) ok "the resync repaired the rules, hairpin works again" ;; *) bad "after repair: $out" ;; esac

iptables-save -t nat | grep -q -- '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES' \
  && ipset list -n | grep -qx KUBE-CLUSTER-IP && ok "the agent left kube-proxy's chains and sets alone" \
  || bad "kube-proxy's leftovers changed while the agent ran"
# Migration without a gap: kube-proxy's leftovers go while the agent serves.
kube-ipvs cleanup --kube-proxy-only --log-level error || bad "cleanup --kube-proxy-only exited $?"
left=$(iptables-save | grep -E -- '-j KUBE-SERVICES|^:KUBE-SERVICES'; ipset list -n | grep -E '^KUBE-[^I]')
[ -z "$left" ] && ok "cleanup --kube-proxy-only removed kube-proxy's chains and sets" || bad "left: $left"
out=$(in_ns pod-a probe -tcp 10.96.0.100:80 -n 4)
case "$out" in *pod-a=*failures=0) ok "... and the agent's shim kept serving (hairpin works)" ;; *) bad "after --kube-proxy-only: $out" ;; esac
kill "$agent"; wait "$agent"

# The node address the NodePorts are on goes (an address change, a NIC
# gone): cleanup without flags must still find them, by its records.
n=$(ipvsadm -Sn | grep -c -- '-A -t 192.168.50.1:3008')
want=$(cat /manifests/*.yaml | grep -c 'nodePort: 3008')
[ "$n" = "$want" ] && [ "$n" -gt 0 ] || bad "want $want NodePort virtual servers (one per nodePort in the manifests) before cleanup, got $n"
$IP link del v-ext
kube-ipvs cleanup --log-level error >/tmp/cleanup.txt || bad "cleanup exited $?"
left=$(ipvsadm -Sn)
[ -z "$left" ] && ok "cleanup (no flags) removed every virtual server, the $n NodePorts on a node address gone since included" \
  || bad "left after cleanup: $left"

# A kube-proxy-shaped leftover set again, for cleanup --kube-proxy.
ipset create KUBE-LOOP-BACK hash:ip,port,ip && ipset add KUBE-LOOP-BACK 10.244.1.2,tcp:8080,10.244.1.2

kube-ipvs cleanup --kube-proxy --log-level error >/tmp/cleanup.txt || bad "cleanup exited $?"
left=$(iptables-save | grep -E 'KUBE-' ; ip6tables-save | grep -E 'KUBE-'; ipset list -n | grep KUBE-)
[ -z "$left" ] && ok "cleanup --kube-proxy: no KUBE-* chain, rule or set left" || bad "left after cleanup: $left"
[ -z "$(ipvsadm -Sn)" ] && ok "cleanup: IPVS table empty" || bad "IPVS left: $(ipvsadm -Sn)"

[ "$failed" = 0 ] && echo "shim-vm: PASS" || { echo "--- agent log"; tail -n 40 /tmp/agent.log; echo "shim-vm: FAIL"; }
exit "$failed"
GUEST

adds=(--add "$work/kube-ipvs:/usr/local/bin/kube-ipvs" --add "$work/echo-server:/usr/local/bin/echo-server"
  --add "$work/probe:/usr/local/bin/probe" --add "$work/guest.sh:/guest.sh")
for f in "$root"/scripts/testdata/shim/*.yaml; do adds+=(--add "$f:/manifests/$(basename "$f")"); done
"$root/scripts/vm/run.sh" --timeout "${KUBE_IPVS_VM_TIMEOUT:-600}" "${adds[@]}" -- sh /guest.sh
