# guest.sh: the fault suite's guest side (busybox sh), run by
# scripts/fault-vm.sh inside the IPVS VM. Two scenarios, in order:
#
#   kill:  a manifest folder of $FAULT_SERVICES Services (ClusterIP, every
#          tenth also NodePort), and keepalived-like foreign state made
#          beforehand (virtual servers, a dummy link with its VIP, an ipset,
#          iptables rules). The agent is started and SIGKILLed $FAULT_KILLS
#          times at random points (random delays) of its sync, and some
#          Services are deleted between kills; then one agent runs to
#          convergence. Checked: `kube-ipvs diff` and a --dry-run plan
#          nothing, the table, the VIPs and the set members equal what the
#          remaining manifests ask for (zero orphans, counted and listed),
#          and the foreign state is byte-for-byte what it was.
#   lock:  the agent on the legacy iptables backend (the one that takes
#          /run/xtables.lock), a shim rule deleted behind its back and the
#          lock held for $FAULT_LOCK_HOLD s while full resyncs want to
#          rewrite the rules. Checked: /healthz and /metrics answer within
#          5 s all along (under emulation running nc alone can take seconds); after release the rule is back and diff is empty.
#          The agent must report the held lock (iptables-restore waits a
#          bounded time for it).
#
# Orphans (a virtual server left owned by nobody by a crash between its
# create and its ownership record; the record is written before each
# create, so there must be none) are counted, listed as "fault-vm: ORPHAN"
# and fail the run.
set -u
N=${FAULT_SERVICES:-1000}
KILLS=${FAULT_KILLS:-5}
MAXDELAY=${FAULT_MAX_DELAY_MS:-40000}
HOLD=${FAULT_LOCK_HOLD:-40}
SEED=${FAULT_SEED:-$$}
M=/tmp/manifests
NODE=node-a
NODEIP=192.168.122.10
DBG=127.0.0.1:10247
fail() { echo "fault-vm: FAIL: $*"; FAILED=1; }
FAILED=0
now() { awk '{print $1}' /proc/uptime; }
since() { awk -v s="$1" '{printf "%.1f", $1 - s}' /proc/uptime; }

# --- manifests -----------------------------------------------------------------
# Service i: ClusterIP 10.96.A.B:80/TCP -> 10.244.A.B:8080 and 10.245.A.B:8080;
# every tenth is a NodePort (30000 + i/10) on the node's address too.
mkdir -p $M
cat >$M/node.yaml <<NODE_YAML
apiVersion: v1
kind: Node
metadata: {name: $NODE}
status:
  addresses:
    - {type: InternalIP, address: $NODEIP}
NODE_YAML
t0=$(now)
awk -v n="$N" -v dir=$M -v node=$NODE 'BEGIN {
  for (i = 1; i <= n; i++) {
    a = int(i / 250) + 1; b = i % 250 + 1; f = dir "/s" i ".yaml"
    np = (i % 10 == 0)
    print "apiVersion: v1\nkind: Service\nmetadata: {name: s" i ", namespace: default}\nspec:" > f
    print "  type: " (np ? "NodePort" : "ClusterIP") "\n  clusterIP: 10.96." a "." b "\n  clusterIPs: [10.96." a "." b "]" > f
    print "  ports:\n  - {name: http, protocol: TCP, port: 80, targetPort: 8080" (np ? ", nodePort: " 30000 + int(i / 10) : "") "}" > f
    print "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice" > f
    print "metadata:\n  name: s" i "-1\n  namespace: default\n  labels: {kubernetes.io/service-name: s" i "}" > f
    print "addressType: IPv4\nports:\n- {name: http, protocol: TCP, port: 8080}\nendpoints:" > f
    print "- {addresses: [10.244." a "." b "], conditions: {ready: true, serving: true, terminating: false}, nodeName: " node "}" > f
    print "- {addresses: [10.245." a "." b "], conditions: {ready: true, serving: true, terminating: false}, nodeName: " node "}" > f
    close(f)
  }
}'
echo "fault-vm: $N Services written in $(since "$t0") s (seed $SEED)"

# want: what the remaining manifests ask for, one line per virtual server
# ("-t VIP:PORT") and per real server ("-t VIP:PORT -> RIP:PORT"); wantvips:
# the ClusterIPs that must be bound.
want() {
  awk -v nodeip=$NODEIP '
    function flush(  i) {
      if (vip == "") return
      print "-t " vip ":80"
      for (i = 1; i <= n; i++) print "-t " vip ":80 -> " eps[i] ":8080"
      if (np != "") {
        print "-t " nodeip ":" np
        for (i = 1; i <= n; i++) print "-t " nodeip ":" np " -> " eps[i] ":8080"
      }
    }
    FNR == 1 { flush(); vip = ""; np = ""; n = 0 }
    /clusterIP:/ { vip = $2 }
    /nodePort:/ { np = $0; sub(/.*nodePort: /, "", np); sub(/}.*/, "", np) }
    /addresses:/ { ep = $0; sub(/.*addresses: \[/, "", ep); sub(/\].*/, "", ep); eps[++n] = ep }
    END { flush() }' $M/s*.yaml | sort >/tmp/want
  awk '/clusterIP:/ {print $2}' $M/s*.yaml | sort >/tmp/wantvips
}

# got: the kernel's table in the same form, without the foreign servers.
got() {
  ipvsadm -Sn | awk '
    $1 == "-A" { print $2 " " $3 }
    $1 == "-a" { print $2 " " $3 " -> " $5 }' | grep -vF -f /tmp/foreign.keys | sort >/tmp/got
  vips4 >/tmp/gotvips
}

# vips4: the IPv4 VIPs bound on kube-ipvs0 either way the agent binds one:
# its addresses and its local routes (protocol 243).
vips4() {
  {
    iproute2-ip -o -4 addr show dev kube-ipvs0 2>/dev/null | awk '{sub(/\/.*/, "", $4); print $4}'
    iproute2-ip -4 route show table local dev kube-ipvs0 proto 243 2>/dev/null | awk '$1 == "local" {print $2}'
  } | sort -u
}

# --- foreign state, as keepalived (and an admin) would leave it -------------------
iproute2-ip link add keepalived0 type dummy
iproute2-ip link set keepalived0 up
iproute2-ip addr add 192.0.2.10/32 dev keepalived0
ipvsadm -A -t 192.0.2.10:443 -s wlc
ipvsadm -a -t 192.0.2.10:443 -r 198.51.100.1:443 -m -w 3
ipvsadm -a -t 192.0.2.10:443 -r 198.51.100.2:443 -m -w 2
# Inside the Service range but never bound to kube-ipvs0: not ours.
ipvsadm -A -u 10.96.250.250:53 -s rr
ipvsadm -a -u 10.96.250.250:53 -r 198.51.100.3:53 -m
# On the node's address, outside the NodePort range: not ours.
ipvsadm -A -t $NODEIP:8443 -s sh
ipset create KEEPALIVED-ALLOW hash:ip
ipset add KEEPALIVED-ALLOW 203.0.113.5
iptables -A INPUT -m set --match-set KEEPALIVED-ALLOW src -m comment --comment "keepalived vrrp" -j ACCEPT
iptables -t nat -A POSTROUTING -s 203.0.113.0/24 -m comment --comment "keepalived snat" -j MASQUERADE
printf '%s\n' '-t 192.0.2.10:443' '-u 10.96.250.250:53' "-t $NODEIP:8443" >/tmp/foreign.keys
foreign() {
  { ipvsadm -Sn | grep -F -f /tmp/foreign.keys
    iproute2-ip -o addr show dev keepalived0 | awk '{print $2, $3, $4}'
    ipset save KEEPALIVED-ALLOW
    iptables-save | grep -F keepalived | sed 's/\[[0-9:]*\]//'
  } | sort
}
foreign >/tmp/foreign.before
echo "fault-vm: foreign state made:"; sed 's/^/  /' /tmp/foreign.before

# --- scenario kill: SIGKILL at random points of the sync ---------------------------
want
total=$(grep -vc -- '->' /tmp/want)
echo "fault-vm: kill: want $total virtual servers, $(grep -c -- '->' /tmp/want) real servers"
RANDOM=$SEED
k=0
deleted=0
while [ $k -lt "$KILLS" ]; do
  k=$((k + 1))
  before=$(wc -l </proc/net/ip_vs)
  kube-ipvs agent --manifests $M --hostname-override $NODE --nodeport-addresses primary --log-level warn >>/tmp/agent.kill.log 2>&1 &
  pid=$!
  # Loading thousands of manifests takes a while under emulation: the kill
  # is timed from the first change the sync makes to the table.
  t0=$(now)
  while [ "$(wc -l </proc/net/ip_vs)" = "$before" ] && kill -0 $pid 2>/dev/null; do
    awk -v s="$t0" '{exit !($1 - s > 180)}' /proc/uptime && break
    usleep 100000
  done
  started=$(since "$t0")
  # The first kill lands early, while virtual servers are being created
  # (the window between a create and its ownership record); the others
  # anywhere.
  span=$MAXDELAY
  [ $k = 1 ] && span=$((MAXDELAY / 6))
  delay=$((RANDOM * span / 32768))
  usleep $((delay * 1000))
  kill -KILL $pid 2>/dev/null || fail "kill $k: the agent had already exited (see /tmp/agent.kill.log)"
  wait $pid 2>/dev/null
  vs=$(ipvsadm -Sn | grep -c '^-A')
  rs=$(ipvsadm -Sn | grep -c '^-a')
  vips=$(vips4 | wc -l)
  echo "fault-vm: kill $k/$KILLS ${delay} ms after the sync's first change (${started} s from start): kernel holds $vs virtual servers, $rs real servers, $vips VIPs (want $((total + 3)) incl. 3 foreign)"
  # Between kills the cluster changes: Services go (some of them half made).
  for i in $(seq 1 "$N" | shuf -n $((N / 40))); do
    [ -f $M/s$i.yaml ] && rm $M/s$i.yaml && deleted=$((deleted + 1))
  done
done
want
total=$(grep -vc -- '->' /tmp/want)
echo "fault-vm: after $KILLS kills and $deleted deleted Services: want $total virtual servers"

t0=$(now)
kube-ipvs agent --manifests $M --hostname-override $NODE --nodeport-addresses primary --log-level info --debug-address $DBG >/tmp/agent.final.log 2>&1 &
pid=$!
converged=
# The views are asked only once the agent logs a finished sync: asking them
# all along would take CPU from the sync under emulation.
while ! grep -q 'reconciler.*synced' /tmp/agent.final.log; do
  kill -0 $pid 2>/dev/null || break
  awk -v s="$t0" '{exit !($1 - s > 600)}' /proc/uptime && break
  sleep 1
done
synced=$(since "$t0")
i=0
while [ $i -lt 60 ]; do
  if kube-ipvs status >/tmp/status.txt 2>/dev/null && grep -q 'last sync .*: ok' /tmp/status.txt &&
    kube-ipvs diff >/tmp/diff.txt 2>&1 && [ ! -s /tmp/diff.txt ]; then
    converged=$(since "$t0"); break
  fi
  i=$((i + 1)); sleep 1
done
echo "fault-vm: first sync of the restarted agent done after $synced s: $(grep -m1 'reconciler.*synced' /tmp/agent.final.log | cut -c1-400)"
[ -n "$converged" ] || fail "the agent did not converge: $(head -c 600 /tmp/status.txt) $(head -c 600 /tmp/diff.txt)"
echo "fault-vm: restarted agent converged (status ok, diff empty) in ${converged:-?} s"

got
orph_vs=$(diff /tmp/want /tmp/got | grep -c '^+[^+]')
miss_vs=$(diff /tmp/want /tmp/got | grep -c '^-[^-]')
orph_vips=$(diff /tmp/wantvips /tmp/gotvips | grep -c '^+[^+]')
miss_vips=$(diff /tmp/wantvips /tmp/gotvips | grep -c '^-[^-]')
# Set members name frontends (and loop-back endpoints); each must belong
# to a remaining Service.
ipset save | awk '$1 == "add" && $2 ~ /^KUBE-IPVS/ {split($3, a, ","); print $2, a[1]}' >/tmp/members
awk '{print $1}' /tmp/wantvips >/tmp/okaddrs
sed -n 's/.*-> \([0-9.]*\):.*/\1/p' /tmp/want | sort -u >>/tmp/okaddrs
[ -n "$(grep -- "-t $NODEIP:" /tmp/want)" ] && echo $NODEIP >>/tmp/okaddrs
orph_members=$(awk 'NR == FNR {ok[$1] = 1; next} !($2 in ok)' /tmp/okaddrs /tmp/members | tee /tmp/orphan.members | wc -l)
echo "fault-vm: kill: $(grep -vc -- '->' /tmp/got) virtual servers, $(grep -c -- '->' /tmp/got) real servers, $(wc -l </tmp/gotvips) VIPs, $(wc -l </tmp/members) set members"
echo "fault-vm: kill: orphans: $orph_vs table lines, $orph_vips VIPs, $orph_members set members; missing: $miss_vs table lines, $miss_vips VIPs"
diff /tmp/want /tmp/got | grep '^+[^+]' | head -40 | sed 's/^+/fault-vm: ORPHAN table: /'
diff /tmp/wantvips /tmp/gotvips | grep '^+[^+]' | head -20 | sed 's/^+/fault-vm: ORPHAN VIP: /'
head -20 /tmp/orphan.members | sed 's/^/fault-vm: ORPHAN set member: /'
[ "$orph_vips" -eq 0 ] && [ "$orph_members" -eq 0 ] || fail "orphan VIPs or set members after SIGKILLs"
[ "$orph_vs" -eq 0 ] || fail "$orph_vs table lines owned by nobody after the kills (created, then killed, their Services deleted meanwhile)"
[ "$miss_vs" -eq 0 ] && [ "$miss_vips" -eq 0 ] || {
  diff /tmp/want /tmp/got | grep '^-[^-]' | head -20
  fail "the converged table lacks what the manifests ask for"
}
foreign >/tmp/foreign.after
diff -u /tmp/foreign.before /tmp/foreign.after || fail "foreign state changed"
echo "fault-vm: kill: foreign state intact ($(wc -l </tmp/foreign.after) lines)"
kill -TERM $pid; wait $pid
plan=$(kube-ipvs agent --manifests $M --hostname-override $NODE --nodeport-addresses primary --dry-run --log-level error 2>&1) || fail "dry-run exited $?: $plan"
[ -z "$plan" ] || fail "a restarted agent plans $(echo "$plan" | wc -l) operations: $(echo "$plan" | head -5)"
echo "fault-vm: kill: a further restart plans zero operations"
grep -i 'panic\|fatal' /tmp/agent.kill.log /tmp/agent.final.log && fail "panic or fatal in the agent's logs"

# --- scenario lock: the xtables lock held -------------------------------------------
kube-ipvs cleanup --log-level error >/dev/null || fail "cleanup exited $?"
foreign >/tmp/foreign.after
diff -u /tmp/foreign.before /tmp/foreign.after || fail "foreign state changed by cleanup"
for m in ip_tables iptable_filter iptable_nat ip6_tables ip6table_filter ip6table_nat; do modprobe -q $m; done
rm -f $M/s*.yaml
awk 'BEGIN { for (i = 1; i <= 20; i++) print i }' | while read -r i; do
  printf 'apiVersion: v1\nkind: Service\nmetadata: {name: l%s}\nspec:\n  clusterIP: 10.96.200.%s\n  ports: [{port: 80}]\n' "$i" "$i" >$M/l$i.yaml
done
kube-ipvs agent --manifests $M --hostname-override $NODE --nodeport-addresses primary --log-level info --debug-address $DBG --iptables-backend legacy --ipvs-sync-period 3s >/tmp/agent.lock.log 2>&1 &
pid=$!
i=0
until kube-ipvs status 2>/dev/null | grep -q 'last sync .*: ok'; do
  i=$((i + 1)); [ $i -lt 120 ] || { fail "lock: the legacy-backend agent never synced ok: $(tail -5 /tmp/agent.lock.log)"; break; }
  sleep 0.5
done
jump=$(iptables-legacy-save -t nat | grep -m1 -- '^-A [A-Z]* .*-j KUBE-IPVS-')
echo "fault-vm: lock: deleting the shim's rule '$jump' and holding /run/xtables.lock for ${HOLD} s"
eval "iptables-legacy -t nat $(echo "$jump" | sed 's/^-A/-D/')" || fail "lock: could not delete $jump"
flock /run/xtables.lock sleep "$HOLD" &
holder=$!
sleep 1
t0=$(now)
polls=0
slow=0
while kill -0 $holder 2>/dev/null; do
  # kube-proxy's ports: /healthz on the health server, /metrics on the
  # metrics server.
  for at in 10256/healthz 10249/metrics; do
    port=${at%%/*} path=/${at#*/}
    s=$(now)
    code=$(printf 'GET %s HTTP/1.0\r\n\r\n' $path | timeout 5 nc -w 4 127.0.0.1 $port 2>/dev/null | head -1 | awk '{print $2}')
    d=$(since "$s")
    polls=$((polls + 1))
    # Under emulation a busy guest can take seconds to run nc at all: only
    # no answer within 5 s counts as a stall (the hold is far longer).
    if [ -z "$code" ]; then
      slow=$((slow + 1)); echo "fault-vm: lock: $path after $(since "$t0") s: no answer within 5 s"
    fi
    echo "$d" >>/tmp/lock.times
    echo "$path $code" >>/tmp/lock.codes
  done
  sleep 1
done
echo "fault-vm: lock: $polls polls of /healthz and /metrics during the hold, $slow without an answer in 5 s, slowest $(sort -n /tmp/lock.times | tail -1) s; codes: $(sort /tmp/lock.codes | uniq -c | tr -s ' \n' ' ')"
[ "$slow" -eq 0 ] || fail "lock: the views stalled behind the xtables lock"
# iptables-restore waits a bounded time for the lock, then fails naming it.
if grep -q 'xtables lock' /tmp/agent.lock.log; then
  echo "fault-vm: lock: the agent reported the held lock: $(grep -m1 'xtables lock' /tmp/agent.lock.log | head -c 300)"
else
  fail "lock: the agent logged nothing about the held xtables lock: $(tail -3 /tmp/agent.lock.log)"
fi
t0=$(now)
converged=
i=0
while [ $i -lt 240 ]; do
  if iptables-legacy-save -t nat | grep -qxF -- "$jump" && kube-ipvs diff >/tmp/diff.txt 2>&1 && [ ! -s /tmp/diff.txt ] &&
    kube-ipvs status 2>/dev/null | grep -q 'last sync .*: ok'; then
    converged=$(since "$t0"); break
  fi
  i=$((i + 1)); sleep 0.5
done
[ -n "$converged" ] && echo "fault-vm: lock: after release the rule is back and diff is empty in $converged s" ||
  fail "lock: no convergence within 120 s of the release: $(tail -5 /tmp/agent.lock.log)"
kill -TERM $pid; wait $pid
foreign >/tmp/foreign.after
diff -u /tmp/foreign.before /tmp/foreign.after || fail "foreign state changed during the lock scenario"

if [ "$FAILED" != 0 ]; then
  echo "--- agent logs (tails)"; tail -n 30 /tmp/agent.kill.log /tmp/agent.final.log /tmp/agent.lock.log
  exit 1
fi
echo "fault-vm: PASS"
