# guest.sh: the resync measurement's guest side (busybox sh), run by
# scripts/resync-vm.sh inside the IPVS VM. For each agent binary named in
# $RESYNC_TOOLS (/usr/local/bin/kube-ipvs-TOOL), one after the other on a
# cleaned kernel, from a manifest folder of $RESYNC_SERVICES Services x 10
# endpoints (files of 1,000 Services):
#   cold   start to the first full sync logged (the whole table), its CPU;
#   idle   CPU over $RESYNC_IDLE s once it is quiet, and the full syncs in it;
#   change $RESYNC_CHANGES new Services written 2 s apart, each timed from
#          its file's write to `ipvsadm -Ln -t VIP` showing its real server;
#   drift  someone else's changes, each timed until repaired ($REPAIR s at most):
#          ipvsadm -d (a real server), ipvsadm -D (a virtual server), a
#          VIP unbound from kube-ipvs0, an ipset member deleted;
#   rss    VmHWM and VmRSS at the end.
# Prints one "resync-vm: RESULT tool=... key=value ..." line per tool.
set -u
N=${RESYNC_SERVICES:-10000}
IDLE=${RESYNC_IDLE:-60}
CHANGES=${RESYNC_CHANGES:-20}
REPAIR=${RESYNC_REPAIR_LIMIT:-900}
TOOLS=${RESYNC_TOOLS:-new}
M=/tmp/manifests
now() { awk '{print $1}' /proc/uptime; }
since() { awk -v s="$1" '{printf "%.2f", $1 - s}' /proc/uptime; }
# cpu PID: utime+stime+cutime+cstime in seconds (children waited for included).
cpu() { awk -v hz=100 '{printf "%.2f", ($14 + $15 + $16 + $17) / hz}' /proc/$1/stat; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a - b}'; }

mkdir -p $M
cat >$M/node.yaml <<NODE_YAML
apiVersion: v1
kind: Node
metadata: {name: node-a}
status:
  addresses:
    - {type: InternalIP, address: 192.168.122.10}
NODE_YAML
t0=$(now)
awk -v n="$N" -v dir=$M 'BEGIN {
  for (i = 0; i < n; i++) {
    a = int(i / 250); b = i % 250 + 1; f = dir "/part" int(i / 1000) ".yaml"
    print "---\napiVersion: v1\nkind: Service\nmetadata: {name: s" i ", namespace: default}" > f
    print "spec: {type: ClusterIP, clusterIP: 10.96." a "." b ", clusterIPs: [10.96." a "." b "], ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080}]}" > f
    print "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice" > f
    print "metadata: {name: s" i "-1, namespace: default, labels: {kubernetes.io/service-name: s" i "}}" > f
    print "addressType: IPv4\nports: [{name: http, protocol: TCP, port: 8080}]\nendpoints:" > f
    for (e = 0; e < 10; e++)
      print "- {addresses: [10." 128 + e "." a "." b "], conditions: {ready: true, serving: true, terminating: false}, nodeName: node-b}" > f
  }
}'
echo "resync-vm: $N Services x 10 endpoints written in $(since "$t0") s"

# waitfor SECS CMD...: poll CMD every 0.05 s until it succeeds; prints the
# seconds it took, or "timeout".
waitfor() {
  lim=$1; shift; s=$(now)
  while ! "$@" >/dev/null 2>&1; do
    if [ "$(awk -v s="$s" -v l="$lim" '{print ($1 - s > l)}' /proc/uptime)" = 1 ]; then echo timeout; return 1; fi
    usleep 50000
  done
  since "$s"
}
# vip I, ep I E: Service I's ClusterIP and its endpoint E, as written above.
vip() { echo "10.96.$(($1 / 250)).$(($1 % 250 + 1))"; }
ep() { echo "10.$((128 + $2)).$(($1 / 250)).$(($1 % 250 + 1))"; }
hasreal() { ipvsadm -Ln -t "$1" 2>/dev/null | grep -q -- "-> $2"; }
hasvs() { ipvsadm -Ln -t "$1" >/dev/null 2>&1; }
hasaddr() { iproute2-ip addr show dev kube-ipvs0 | grep -q "inet $1/"; }
hasroute() { iproute2-ip -4 route show table local dev kube-ipvs0 proto 243 | grep -q "^local $1 "; }
# hasvip V: V bound on kube-ipvs0 either way an agent binds one: as an
# address or as its local route. unbind V deletes it the way it is bound.
hasvip() { hasaddr "$1" || hasroute "$1"; }
unbind() {
  if hasroute "$1"; then
    iproute2-ip route del local "$1" dev kube-ipvs0 table local proto 243
  else
    iproute2-ip addr del "$1"/32 dev kube-ipvs0
  fi
}
hasmember() { ipset test KUBE-IPVS-CLUSTER-IP "$1" 2>/dev/null; }
pct() { sort -n | awk -v p="$1" '{v[NR] = $1} END {if (NR == 0) {print "-"; exit} i = int(NR * p / 100 + 0.999); if (i < 1) i = 1; print v[i]}'; }

for tool in $TOOLS; do
  bin=/usr/local/bin/kube-ipvs-$tool
  log=/tmp/$tool.log
  rm -f $M/chg-*.yaml
  t0=$(now)
  $bin agent --manifests $M --hostname-override node-a --debug-address 127.0.0.1:10247 --log-level debug >$log 2>&1 &
  pid=$!
  until grep -q 'synced.*"full": true' $log; do
    kill -0 $pid 2>/dev/null || { echo "resync-vm: $tool died"; tail -5 $log; break; }
    sleep 1
  done
  cold=$(since "$t0"); coldcpu=$(cpu $pid)
  echo "resync-vm: $tool cold start $cold s, $coldcpu CPU-s"
  sleep 15 # let the tail of the start (rules, logs) pass
  fulls0=$(grep -c 'synced.*"full": true' $log)
  c0=$(cpu $pid); sleep "$IDLE"; c1=$(cpu $pid)
  idle=$(sub "$c1" "$c0"); fulls=$(($(grep -c 'synced.*"full": true' $log) - fulls0))
  echo "resync-vm: $tool idle $idle CPU-s over $IDLE s ($fulls full syncs)"
  # The last whole read by part (IPVS, addresses, sets) and the drift
  # check's read with its rules check, from the debug log.
  grep 'DEBUG.*reader.*observed' $log | tail -1
  grep 'rescan read the kernel' $log | tail -1

  : >/tmp/lat
  c0=$(cpu $pid)
  j=1
  while [ $j -le "$CHANGES" ]; do
    s=$(now)
    cat >$M/chg-$j.yaml <<CHG
apiVersion: v1
kind: Service
metadata: {name: chg$j, namespace: default}
spec: {type: ClusterIP, clusterIP: 10.97.0.$j, clusterIPs: [10.97.0.$j], ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: chg$j-1, namespace: default, labels: {kubernetes.io/service-name: chg$j}}
addressType: IPv4
ports: [{name: http, protocol: TCP, port: 8080}]
endpoints:
- {addresses: [10.250.0.$j], conditions: {ready: true, serving: true, terminating: false}, nodeName: node-b}
CHG
    lat=$(waitfor 120 hasreal 10.97.0.$j:80 10.250.0.$j:8080)
    echo "$lat" >>/tmp/lat
    rest=$(awk -v s="$s" '{d = 2 - ($1 - s); print (d > 0 ? d : 0)}' /proc/uptime)
    sleep "$rest"
    j=$((j + 1))
  done
  c1=$(cpu $pid)
  p50=$(grep -v timeout /tmp/lat | pct 50); p99=$(grep -v timeout /tmp/lat | pct 99); mx=$(grep -v timeout /tmp/lat | pct 100)
  lost=$(grep -c timeout /tmp/lat)
  echo "resync-vm: $tool changes p50 $p50 s, p99 $p99 s, max $mx s, $lost never seen; $(sub "$c1" "$c0") CPU-s for $CHANGES"

  # Someone else's changes, on Services far apart in the table.
  v1=$(vip $((N / 4))); v2=$(vip $((N / 2))); v3=$(vip $((3 * N / 4))); v4=$(vip $((N - 1)))
  ipvsadm -d -t $v1:80 -r $(ep $((N / 4)) 0):8080
  rdel=$(waitfor $REPAIR hasreal $v1:80 $(ep $((N / 4)) 0):8080)
  ipvsadm -D -t $v2:80
  vdel=$(waitfor $REPAIR hasreal $v2:80 $(ep $((N / 2)) 1):8080)
  unbind $v3
  adel=$(waitfor $REPAIR hasvip $v3)
  ipset del KUBE-IPVS-CLUSTER-IP $v4,tcp:80
  mdel=$(waitfor $REPAIR hasmember $v4,tcp:80)
  # What one check of the netfilter rules costs (both families, as a
  # rescan's table read and a full sync run it).
  s=$(now)
  iptables-save >/dev/null; ip6tables-save >/dev/null
  echo "resync-vm: iptables-save + ip6tables-save took $(since "$s") s"
  echo "resync-vm: $tool repaired: ipvsadm -d $rdel s, ipvsadm -D $vdel s, VIP unbound $adel s, ipset del $mdel s"
  # How the repairs went, from the agent's log: its last 40 reads of the
  # rescan, waits it announced and syncs that changed something.
  grep -E 'rescan read the kernel|the next read waits|drift|synced[[:space:]]+[{]' $log | grep -v '"ops": 0' | tail -40 | sed 's/^/resync-vm: log: /'

  hwm=$(awk '/VmHWM/ {print $2 / 1024}' /proc/$pid/status); rss=$(awk '/VmRSS/ {print $2 / 1024}' /proc/$pid/status)
  echo "resync-vm: RESULT tool=$tool n=$N cold_s=$cold cold_cpu=$coldcpu idle_cpu=$idle idle_s=$IDLE idle_fulls=$fulls change_p50=$p50 change_p99=$p99 change_max=$mx never=$lost repair_real=$rdel repair_vs=$vdel repair_addr=$adel repair_member=$mdel hwm_mb=$hwm rss_mb=$rss"
  kill $pid; wait $pid 2>/dev/null
  grep -i -E 'error|panic' $log | head -5
  $bin cleanup >/dev/null 2>&1 || echo "resync-vm: cleanup failed"
done
