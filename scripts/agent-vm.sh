#!/usr/bin/env bash
# agent-vm.sh: run the kube-ipvs agent itself on a real IPVS kernel, inside a
# throwaway VM (scripts/vm/run.sh), against the example manifests:
#   1. `agent --manifests examples --once` programs the table; `ipvsadm -Ln`
#      must equal scripts/testdata/agent-once.ipvsadm;
#   2. a second agent against the unchanged folder plans nothing (`--dry-run`
#      prints no operation): restart is free;
#   3. the running agent's `status` annotates the table, its /metrics counts
#      the virtual servers, and `diff` is empty, then names a real server
#      deleted behind its back;
#   4. kube-proxy's ports: /healthz and /livez on 10256 with kube-proxy's
#      JSON and headers, /metrics and /proxyMode on 10249, the debug pages
#      alone on 10247; tainting the Node ToBeDeletedByClusterAutoscaler
#      fails /healthz (nodeEligible false) and not /livez; a second agent
#      with --bind-address-hard-fail exits naming the address it could not
#      listen on, one without keeps running;
#   5. a Service asking for a scheduler the kernel has no module for (twos
#      on Debian's cloud kernel) fails alone: the sync stays ok, /healthz
#      answers 200, kube_ipvs_service_errors counts it, the rest is served;
#   6. a Service whose external IP:port keepalived (here: ipvsadm by hand)
#      already serves leaves that virtual server and its address alone, is
#      reported, and its going deletes nothing of it;
#   7. `cleanup` (no flags) removes everything the agent made, the link and a
#      Local-policy NodePort on a node address the VM does not have
#      included, and leaves a virtual server added by hand (as keepalived
#      would) alone;
#   8. a kube-proxy command line and config file: a field kube-proxy v1.37
#      does not know is warned about and the rest applies, bare booleans
#      (--iptables-localhost-nodeports --masquerade-all) take no value,
#      --healthz-port=0 turns the health server off; rewriting the file exits
#      the agent 1 with one log line, and the next start applies the new one.
# Set UPDATE=1 to rewrite the golden file from what the kernel printed.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
golden="$root/scripts/testdata/agent-once.ipvsadm"

(cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$work/kube-ipvs" ./cmd/kube-ipvs)
cp "$golden" "$work/expected.ipvsadm" 2>/dev/null || : >"$work/expected.ipvsadm"

cat >"$work/guest.sh" <<'GUEST'
set -u
fail() { echo "agent-vm: FAIL: $*"; exit 1; }
# The kernel lists services in hash-table order, and the hash mixes in a
# per-boot value: sort whole service blocks (a service line with its real
# servers) so the comparison does not depend on the boot.
blocks() {
  tab=$(printf '\t')
  awk '/^(TCP|UDP|SCTP|FWM) /{svc=$0} {print (svc=="" ? "0" : "1 " svc) "\t" $0}' "$1" |
    sort -s -t "$tab" -k1,1 | cut -f2-
}
kube-ipvs agent --manifests /examples --once --hostname-override node-a --log-level info \
  || fail "agent --once exited $?"
ipvsadm -Ln >/tmp/got.ipvsadm
echo "--- ipvsadm -Ln after agent --once"
cat /tmp/got.ipvsadm
echo "--- golden:begin"; cat /tmp/got.ipvsadm; echo "--- golden:end"
blocks /expected.ipvsadm >/tmp/want.sorted
blocks /tmp/got.ipvsadm >/tmp/got.sorted
diff -u /tmp/want.sorted /tmp/got.sorted || fail "ipvsadm -Ln differs from the golden file"
iproute2-ip route show table local dev kube-ipvs0 proto 243 | grep -q '^local 10.96.0.100 ' || fail "VIP 10.96.0.100 not bound through kube-ipvs0 (a local route)"

plan=$(kube-ipvs agent --manifests /examples --dry-run --hostname-override node-a --log-level error) \
  || fail "dry-run exited $?"
[ -z "$plan" ] || fail "a second agent against the same folder planned operations: $plan"
echo "--- restart plans zero operations"

# The running agent's diff and status: diff is empty at steady state and names drift
# made behind its back; status annotates the table.
kube-ipvs agent --manifests /examples --hostname-override node-a --log-level warn \
  --debug-address 127.0.0.1:10247 >/tmp/agent.log 2>&1 &
agent=$!
i=0
until kube-ipvs status >/tmp/status.txt 2>/dev/null && grep -q 'last sync .*: ok' /tmp/status.txt; do
  i=$((i + 1)); [ $i -lt 60 ] || fail "the agent's status never showed a good sync"; sleep 0.5
done
echo "--- kube-ipvs status"; cat /tmp/status.txt
grep -q -- '-t 10.96.0.100:80 rr (flag)  default/web port http (ClusterIP)' /tmp/status.txt || fail "status lacks the web Service"
grep -q -- '-> 10.244.1.2:8080 .* ready on node-a' /tmp/status.txt || fail "status lacks web's endpoints"
# Busybox wget crashes in this guest, so a raw HTTP GET through nc (-w:
# wait for the answer after EOF). get PORT PATH prints headers and body.
get() { printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" | nc -w 2 127.0.0.1 "$1" | tr -d '\r'; }
# Prometheus metrics on kube-proxy's metrics port.
get 10249 /metrics | sed '1,/^$/d' >/tmp/metrics.txt
vs=$(grep -cE '^(TCP|UDP|SCTP|FWM) ' /tmp/got.ipvsadm)
echo "--- /metrics (kube-ipvs and kube-proxy families; our sync duration buckets up to 1.6 ms)"
grep -E '^(kube_ipvs|kubeproxy)_' /tmp/metrics.txt | grep -v '_bucket' | grep -vE '^kube_ipvs_operations_total.* 0$'
grep -E '^kube_ipvs_sync_duration_seconds_bucket\{kind="[a-z]*",le="(5e-05|0\.000[1-9]|0\.0016)"' /tmp/metrics.txt
grep -qE '^kubeproxy_sync_proxy_rules_duration_seconds_count\{ip_family="IPv4"\} [1-9]' /tmp/metrics.txt \
  || fail "/metrics lacks kube-proxy's sync duration count: $(head -c 300 /tmp/metrics.txt)"
grep -qx "kube_ipvs_virtual_servers $vs" /tmp/metrics.txt \
  || fail "/metrics: want kube_ipvs_virtual_servers $vs, got: $(grep '^kube_ipvs_virtual_servers' /tmp/metrics.txt)"
kube-ipvs diff >/tmp/diff.txt; rc=$?
[ $rc -eq 0 ] && [ ! -s /tmp/diff.txt ] || fail "diff at steady state exited $rc: $(cat /tmp/diff.txt)"
ipvsadm -d -t 10.96.0.100:80 -r 10.244.2.2:8080
kube-ipvs diff >/tmp/diff.txt; rc=$?
[ $rc -eq 1 ] && [ "$(cat /tmp/diff.txt)" = "-a -t 10.96.0.100:80 -r 10.244.2.2:8080 -m -w 1" ] \
  || fail "diff after a hand-deleted real server exited $rc: $(cat /tmp/diff.txt)"
echo "--- kube-ipvs diff: empty at steady state, names a real server deleted by hand"

# kube-proxy's ports, each serving its own paths only.
get 10256 /healthz >/tmp/healthz.txt
echo "--- :10256/healthz"; cat /tmp/healthz.txt; echo
head -1 /tmp/healthz.txt | grep -q ' 200 ' || fail "/healthz: $(head -1 /tmp/healthz.txt)"
grep -qx 'Content-Type: application/json' /tmp/healthz.txt || fail "/healthz without kube-proxy's content type"
grep -qx 'X-Content-Type-Options: nosniff' /tmp/healthz.txt || fail "/healthz without nosniff"
grep -qE '^\{"lastUpdated":"[^"]+","currentTime":"[^"]+","nodeEligible":true,"healthy":true,"status":\{"IPv4":\{"lastUpdated":"[^"]+","healthy":true\},"IPv6":\{"lastUpdated":"[^"]+","healthy":true\}\}\}$' /tmp/healthz.txt \
  || fail "/healthz body is not kube-proxy's: $(tail -1 /tmp/healthz.txt)"
get 10256 /livez | grep -qE '^\{"lastUpdated":"[^"]+","currentTime":"[^"]+","healthy":true,' || fail "/livez: $(get 10256 /livez)"
get 10256 /metrics | head -1 | grep -q ' 404 ' || fail "/metrics on the health port: $(get 10256 /metrics | head -1)"
[ "$(get 10249 /proxyMode | tail -1)" = ipvs ] || fail "/proxyMode: $(get 10249 /proxyMode)"
get 10249 /livez | head -1 | grep -q ' 404 ' || fail "/livez on the metrics port: $(get 10249 /livez | head -1)"
for path in /metrics /healthz /livez; do
  get 10247 $path | head -1 | grep -q ' 404 ' || fail "$path on the debug port: $(get 10247 $path | head -1)"
done
echo "--- :10256 /healthz /livez (kube-proxy's JSON), :10249 /metrics /proxyMode, :10247 the debug pages only"

# A Node the cluster autoscaler is about to delete: /healthz fails so load
# balancers drain it, /livez does not (a restart would not help).
cp /examples/node.yaml /tmp/node.yaml
cat >>/examples/node.yaml <<'YAML'
spec:
  taints:
    - {key: ToBeDeletedByClusterAutoscaler, value: "1700000000", effect: NoSchedule}
YAML
i=0
until get 10256 /healthz | head -1 | grep -q ' 503 '; do
  i=$((i + 1)); [ $i -lt 60 ] || fail "/healthz never failed for a Node tainted for deletion: $(get 10256 /healthz | tail -1)"; sleep 0.5
done
get 10256 /healthz | tail -1 | grep -q '"nodeEligible":false,"healthy":true' || fail "/healthz for a tainted Node: $(get 10256 /healthz | tail -1)"
get 10256 /livez | head -1 | grep -q ' 200 ' || fail "/livez for a tainted Node: $(get 10256 /livez | head -1)"
cp /tmp/node.yaml /examples/node.yaml
i=0
until get 10256 /healthz | head -1 | grep -q ' 200 '; do
  i=$((i + 1)); [ $i -lt 60 ] || fail "/healthz did not recover when the taint went: $(get 10256 /healthz | tail -1)"; sleep 0.5
done
echo "--- a Node tainted ToBeDeletedByClusterAutoscaler: /healthz 503 (nodeEligible false), /livez 200; 200 again untainted"

# The ports are taken: with --bind-address-hard-fail a second agent exits
# naming the address; without, it logs, keeps trying and keeps running.
timeout 60 kube-ipvs agent --manifests /examples --hostname-override node-a --debug-address '' \
  --bind-address-hard-fail >/tmp/hard.log 2>&1; rc=$?
[ $rc -eq 1 ] && grep -qE 'server on (0\.0\.0\.0:10256|127\.0\.0\.1:10249): listen tcp [0-9.:]+: bind: address already in use' /tmp/hard.log \
  || fail "hard fail: exit $rc: $(tail -3 /tmp/hard.log)"
kube-ipvs agent --manifests /examples --hostname-override node-a --debug-address '' >/tmp/soft.log 2>&1 &
soft=$!
i=0
until grep -q 'cannot serve; trying again' /tmp/soft.log; do
  i=$((i + 1)); [ $i -lt 60 ] || fail "soft fail: nothing logged: $(tail -3 /tmp/soft.log)"; sleep 0.5
done
kill -0 $soft || fail "soft fail: the agent exited: $(tail -3 /tmp/soft.log)"
kill $soft; wait $soft
echo "--- ports taken: --bind-address-hard-fail exits 1 naming $(grep -oE '[a-z]+ server on [0-9.]+:[0-9]+' /tmp/hard.log | head -1); without it the agent keeps running"

if grep -q '^ip_vs_twos ' /proc/modules; then
  echo "--- this kernel has ip_vs_twos: the missing-scheduler check does not apply"
else
  cat >/examples/twos.yaml <<'YAML'
apiVersion: v1
kind: Service
metadata:
  name: fancy
  namespace: default
  annotations:
    kube-ipvs.io/scheduler: twos
spec:
  clusterIP: 10.96.0.77
  ports:
    - {name: http, protocol: TCP, port: 80, targetPort: 8080}
YAML
  i=0
  until get 10249 /metrics | grep -qx 'kube_ipvs_service_errors 1'; do
    i=$((i + 1)); [ $i -lt 60 ] || fail "a twos Service never showed in kube_ipvs_service_errors"; sleep 0.5
  done
  kube-ipvs status >/tmp/status.txt 2>&1
  grep -q 'last sync .*: ok' /tmp/status.txt || fail "a twos Service failed the sync: $(head -1 /tmp/status.txt)"
  get 10256 /healthz | head -1 | grep -q ' 200 ' || fail "/healthz with a twos Service: $(get 10256 /healthz | head -1)"
  ipvsadm -Ln | grep -q '10.96.0.100:80' || fail "the web Service went with the twos one"
  ipvsadm -Ln | grep -q '10.96.0.77' && fail "a virtual server with a scheduler the kernel lacks exists"
  grep -q 'FailedToProgram' /tmp/agent.log || fail "the twos Service was not reported: $(tail -3 /tmp/agent.log)"
  echo "--- a twos Service (no module) failed alone: sync ok, /healthz 200, kube_ipvs_service_errors 1"
  rm /examples/twos.yaml
fi

ipvsadm -A -t 192.0.2.2:443 -s wlc
ipvsadm -a -t 192.0.2.2:443 -r 10.0.0.5:443 -m
cat >/examples/taken.yaml <<'YAML'
apiVersion: v1
kind: Service
metadata:
  name: taken
  namespace: default
spec:
  clusterIP: 10.96.0.78
  externalIPs: [192.0.2.2]
  ports:
    - {name: https, protocol: TCP, port: 443, targetPort: 8443}
YAML
i=0
until ipvsadm -Ln | grep -q '10.96.0.78:443'; do
  i=$((i + 1)); [ $i -lt 60 ] || fail "the Service beside keepalived's server was never applied"; sleep 0.5
done
sleep 1
keep="-A -t 192.0.2.2:443 -s wlc
-a -t 192.0.2.2:443 -r 10.0.0.5:443 -m -w 1"
[ "$(ipvsadm -Sn | grep 192.0.2.2)" = "$keep" ] || fail "keepalived's server taken over: $(ipvsadm -Sn | grep 192.0.2.2)"
iproute2-ip -o addr show dev kube-ipvs0 | grep -q '192.0.2.2/' && fail "keepalived's address bound on kube-ipvs0"
iproute2-ip route show table local dev kube-ipvs0 | grep -q ' 192.0.2.2 ' && fail "keepalived's address routed through kube-ipvs0"
# Added behind the agent's back, the server is only known to it from its
# next full read of the kernel (the failed create asks for one at once).
i=0
until grep -q 'ForeignVirtualServer' /tmp/agent.log; do
  i=$((i + 1)); [ $i -lt 60 ] || fail "the refused frontend was not reported: $(grep -v twos /tmp/agent.log | tail -5)"; sleep 0.5
done
[ "$(ipvsadm -Sn | grep 192.0.2.2)" = "$keep" ] || fail "keepalived's server taken over: $(ipvsadm -Sn | grep 192.0.2.2)"
rm /examples/taken.yaml
i=0
while ipvsadm -Ln | grep -q '10.96.0.78:443'; do
  i=$((i + 1)); [ $i -lt 60 ] || fail "the Service beside keepalived's server never went"; sleep 0.5
done
[ "$(ipvsadm -Sn | grep 192.0.2.2)" = "$keep" ] || fail "keepalived's server changed when the Service went: $(ipvsadm -Sn | grep 192.0.2.2)"
ipvsadm -D -t 192.0.2.2:443
echo "--- a Service on keepalived's address:port left its server and address alone, and went without them"
kill $agent; wait $agent

# A Local-policy NodePort: only the agent's record of its frontends names it.
mkdir -p /np && cp /examples/*.yaml /np/ && cp /nodeport-local.yaml /np/
kube-ipvs agent --manifests /np --once --hostname-override node-a --nodeport-addresses primary --log-level warn || fail "agent --once with a NodePort exited $?"
ipvsadm -Sn | grep -q -- '-A -t 192.168.122.10:30081 ' || fail "no NodePort virtual server: $(ipvsadm -Sn)"

ipvsadm -A -t 192.0.2.1:443 -s wlc
kube-ipvs cleanup --log-level error >/tmp/cleanup.txt || fail "cleanup exited $?"
left=$(ipvsadm -Sn)
[ "$left" = "-A -t 192.0.2.1:443 -s wlc" ] || fail "after cleanup the table holds: $left"
iproute2-ip link show kube-ipvs0 >/dev/null 2>&1 && fail "kube-ipvs0 still exists after cleanup"
echo "--- cleanup removed $(grep -c '^-D ' /tmp/cleanup.txt) virtual servers (a NodePort among them) and the link; the foreign one survived"

# kube-proxy's own command line and file, and the file changing under it.
mkdir -p /kp
cat >/kp/config.conf <<'YAML'
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: ipvs
futureField: {enabled: true}
ipvs:
  scheduler: rr
YAML
kube-ipvs agent --manifests /examples --hostname-override node-a --config /kp/config.conf --debug-address '' \
  --iptables-localhost-nodeports --masquerade-all --healthz-port=0 --profiling >/tmp/kp.log 2>&1 &
kp=$!
i=0
until ipvsadm -Ln | grep -q '10.96.0.100:80 rr'; do
  i=$((i + 1)); [ $i -lt 60 ] || fail "the agent with kube-proxy's flags never programmed: $(tail -3 /tmp/kp.log)"; sleep 0.5
done
grep -q 'unknown field \\"futureField\\"' /tmp/kp.log || fail "no warning about the unknown field: $(head -5 /tmp/kp.log)"
get 10256 /healthz | head -1 | grep -q ' 200 ' && fail "--healthz-port=0 left the health server on"
get 10249 /proxyMode | tail -1 | grep -qx ipvs || fail "the metrics server is off too: $(get 10249 /proxyMode)"
sed -i 's/scheduler: rr/scheduler: lc/' /kp/config.conf
i=0
while kill -0 $kp 2>/dev/null; do
  i=$((i + 1)); [ $i -lt 60 ] || fail "the agent did not exit when its config file changed: $(tail -3 /tmp/kp.log)"; sleep 0.5
done
wait $kp; rc=$?
[ $rc -eq 1 ] && grep -q 'the config file changed: exiting' /tmp/kp.log || fail "exit $rc on a changed file: $(tail -3 /tmp/kp.log)"
kube-ipvs agent --manifests /examples --hostname-override node-a --config /kp/config.conf --once --log-level warn || fail "restart with the new file exited $?"
ipvsadm -Ln | grep -q '10.96.0.100:80 lc' || fail "the new file's scheduler not applied: $(ipvsadm -Ln | grep 10.96.0.100)"
kube-ipvs cleanup --config /kp/config.conf --log-level error >/dev/null || fail "cleanup --config exited $?"
echo "--- kube-proxy's flags and file: unknown field warned, bare booleans, --healthz-port=0 off; a changed file exits 1 (logged: the config file changed: exiting) and the restart applies it"
echo "agent-vm: PASS"
GUEST

adds=(--add "$work/kube-ipvs:/usr/local/bin/kube-ipvs" --add "$work/guest.sh:/guest.sh"
  --add "$work/expected.ipvsadm:/expected.ipvsadm"
  --add "$root/scripts/testdata/agent/nodeport-local.yaml:/nodeport-local.yaml")
for f in "$root"/examples/*.yaml; do adds+=(--add "$f:/examples/$(basename "$f")"); done

set +e
"$root/scripts/vm/run.sh" --timeout "${KUBE_IPVS_VM_TIMEOUT:-600}" "${adds[@]}" -- sh /guest.sh | tee "$work/console.log"
rc=${PIPESTATUS[0]}
set -e
if [ "${UPDATE:-0}" = 1 ]; then
  sed -n '/^--- golden:begin/,/^--- golden:end/p' "$work/console.log" | sed '1d;$d' | tr -d '\r' >"$golden"
  echo "agent-vm: golden file rewritten: $golden"
fi
exit "$rc"
