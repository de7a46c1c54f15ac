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
#   - `cleanup --kube-proxy` removes the shim and kube-proxy-shaped leftovers;
#   - then a second agent with kube-proxy's other settings: nodePortAddresses
#     unset (a node address added gets its NodePorts within seconds, with a
#     sync period of an hour, and is served; removed, they go and nothing
#     else moves), detect-local InterfaceNamePrefix (a pod on a prefixed veth
#     reaches a ClusterIP unmasqueraded, a client on another interface is
#     masqueraded), masquerade bit 3 (mark 0x8 does the masquerading, no
#     0x4000 anywhere, and cleanup still removes it all).
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
*" 200 OK"*'"localEndpoints": 1,'*) ok "health check 32001 (local endpoint): 200, $(echo "$h" | grep localEndpoints)" ;;
*) bad "health check 32001: $h" ;;
esac
h=$(http_get ext 192.168.50.1 32002)
case "$h" in
*" 503 "*'"localEndpoints": 0,'*) ok "health check 32002 (no local endpoint): 503, $(echo "$h" | grep localEndpoints)" ;;
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

# A second agent with kube-proxy's other settings: NodePorts on
# every node address (nodePortAddresses unset), pod traffic told by its
# interfaces' name prefix, masquerade bit 3. A sync period of an hour: only
# the address notifications can bring a new address's NodePorts in time.
netns ext2 192.168.60.2 192.168.60.1 || die "namespace ext2"
kube-ipvs agent --manifests /manifests --hostname-override node-a --ipvs-sync-period 1h \
  --detect-local-mode InterfaceNamePrefix --pod-interface-name-prefix v-pod --iptables-masquerade-bit 3 \
  --log-level info >/tmp/agent2.log 2>&1 &
agent=$!
wait_for 60 sh -c 'ipvsadm -Ln | grep -q "192.168.60.1:30080"' || { tail -n 40 /tmp/agent2.log; die "second agent: no NodePort on 192.168.60.1 after 60s"; }
grep -q 'nodePortAddresses is unset; NodePort connections will be accepted on all local IPs. Consider using `--nodeport-addresses primary`' /tmp/agent2.log \
  && ok "nodePortAddresses unset: kube-proxy's warning suggesting primary" || bad "no warning about nodePortAddresses"
echo "--- iptables-save -t nat (second agent)"; iptables-save -t nat | grep KUBE-IPVS
save=$(iptables-save)
echo "$save" | grep -q -- '-A KUBE-IPVS-SERVICES ! -i v-pod+ -m set --match-set KUBE-IPVS-CLUSTER-IP dst,dst -j KUBE-IPVS-MARK-MASQ' \
  && ok "detect-local InterfaceNamePrefix: the rule is ! -i v-pod+" || bad "no ! -i v-pod+ rule"
echo "$save" | grep -q -- '-A KUBE-IPVS-MARK-MASQ -j MARK --set-xmark 0x8/0x8' && ! echo "$save" | grep -q 0x4000 \
  && ok "masquerade bit 3: mark 0x8, no 0x4000 anywhere" || bad "masquerade bit 3 not in the rules"

# np-cluster's ClusterIP has one endpoint, pod-a. pod-b is on v-pod-b, a
# pod interface: its address reaches pod-a. ext2 is on v-ext2: masqueraded
# (mark 0x8), pod-a sees the node's address on its link.
g=$(greeting pod-b 10.96.0.101 80)
case "$g" in
"pod-a from 10.244.2.2:"*) ok "detect-local: pod-b (on v-pod-b) -> ClusterIP not masqueraded ($g)" ;;
*) bad "pod-b -> ClusterIP: got '$g'" ;;
esac
g=$(greeting ext2 10.96.0.101 80)
case "$g" in
"pod-a from 10.244.1.1:"*) ok "detect-local: ext2 (on v-ext2) -> ClusterIP masqueraded with mark 0x8 ($g)" ;;
*) bad "ext2 -> ClusterIP: got '$g'" ;;
esac
# Control: without that one rule ext2 keeps its address (the agent, syncing
# hourly, does not repair it meanwhile); put back where it was.
rule='KUBE-IPVS-SERVICES ! -i v-pod+ -m set --match-set KUBE-IPVS-CLUSTER-IP dst,dst -j KUBE-IPVS-MARK-MASQ'
iptables -t nat -D $rule
g=$(greeting ext2 10.96.0.101 80)
iptables -t nat -I KUBE-IPVS-SERVICES 3 ${rule#KUBE-IPVS-SERVICES }
case "$g" in
"pod-a from 192.168.60.2:"*) ok "control: without the ! -i v-pod+ rule ext2 is not masqueraded ($g)" ;;
*) bad "control without the detect-local rule: got '$g'" ;;
esac
[ "$(iptables-save -t nat | grep -- '-A KUBE-IPVS-SERVICES' | sed -n 3p)" = "-A $rule" ] || bad "the rule was not put back in place"

# An address comes: its NodePorts follow, and serve. It goes: they go.
before=$(ipvsadm -Sn | sort)
t0=$(date +%s)
$IP addr add 192.168.61.1/32 dev v-ext2
if wait_for 30 sh -c 'ipvsadm -Ln | grep -q "192.168.61.1:30080"'; then
  ok "address 192.168.61.1 added: its NodePorts within $(($(date +%s) - t0))s (sync period 1h)"
else
  bad "address 192.168.61.1 added: no NodePort after 30s"
fi
g=$(greeting ext2 192.168.61.1 30080)
case "$g" in
"pod-a from 10.244.1.1:"*) ok "NodePort on the new address served ($g)" ;;
*) bad "NodePort on the new address: got '$g'" ;;
esac
echo "--- host addresses the agent saw"; grep 'host addresses' /tmp/agent2.log | tail -n 2
$IP addr del 192.168.61.1/32 dev v-ext2
if wait_for 30 sh -c '! ipvsadm -Ln | grep -q "192.168.61.1:"'; then
  after=$(ipvsadm -Sn | sort)
  [ "$before" = "$after" ] && ok "address removed: its NodePorts went, the other $(echo "$after" | grep -c '^-A') virtual servers as they were" \
    || bad "address removed: the table differs from before it came: before: $before after: $after"
else
  bad "address removed: its NodePorts stay after 30s"
fi
n=$(ipset list KUBE-IPVS-FRONTENDS | grep -c '^192\.168\.61\.1,')
[ "$n" = 0 ] && ok "address removed: no member of it left in KUBE-IPVS-FRONTENDS" || bad "$n members of 192.168.61.1 left"
n=$(grep -c 'sync failed' /tmp/agent2.log)
[ "$n" = 0 ] && ok "second agent: no sync failed" || bad "second agent: $n syncs failed"
kill "$agent"; wait "$agent"
kube-ipvs cleanup --kube-proxy --log-level error >/tmp/cleanup.txt || bad "cleanup exited $?"
left=$(iptables-save | grep -E 'KUBE-' ; ip6tables-save | grep -E 'KUBE-'; ipset list -n | grep KUBE-; ipvsadm -Sn)
[ -z "$left" ] && ok "cleanup after mark 0x8: nothing left" || bad "left after cleanup: $left"

[ "$failed" = 0 ] && echo "shim-vm: PASS" || { echo "--- agent log"; tail -n 40 /tmp/agent.log; echo "--- second agent log"; tail -n 40 /tmp/agent2.log 2>/dev/null; echo "shim-vm: FAIL"; }
exit "$failed"
GUEST

adds=(--add "$work/kube-ipvs:/usr/local/bin/kube-ipvs" --add "$work/echo-server:/usr/local/bin/echo-server"
  --add "$work/probe:/usr/local/bin/probe" --add "$work/guest.sh:/guest.sh")
for f in "$root"/scripts/testdata/shim/*.yaml; do adds+=(--add "$f:/manifests/$(basename "$f")"); done
"$root/scripts/vm/run.sh" --timeout "${KUBE_IPVS_VM_TIMEOUT:-600}" "${adds[@]}" -- sh /guest.sh
