#!/usr/bin/env bash
# demo.sh (`make demo`): kube-ipvs at work on a real IPVS kernel, in a
# throwaway VM (scripts/vm/run.sh). Inside the VM:
#   - every endpoint of examples/web.yaml and examples/dns.yaml is a network
#     namespace running the echo backend (e2e/tools/echo), a client is another;
#   - `kube-ipvs agent --manifests /examples` programs IPVS from the folder;
#   - the probe (e2e/tools/probe) shows round robin over web-1..3 and dns-1..2;
#   - web.yaml is edited live to mark the backend holding a long-lived
#     connection terminating: the agent sets its weight to 0, new connections
#     skip it, and the established one keeps working.
# Exits 0 only if every check held. Needs root (qemu, and prepare.sh installs
# what the VM needs on first use).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$(date +%s)

echo "==> building kube-ipvs, echo and probe (static)"
for pkg in ./cmd/kube-ipvs ./e2e/tools/echo ./e2e/tools/probe; do
  (cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$work/$(basename "$pkg")" "$pkg")
done
echo "    built in $(($(date +%s) - start))s"

cat >"$work/guest.sh" <<'GUEST'
# Runs inside the VM (busybox sh). iproute2 is `iproute2-ip`: busybox ash's
# own `ip` applet would shadow it and has no netns support.
set -u
IP=iproute2-ip
T0=$(date +%s)
failed=0
dmesg -n 1 2>/dev/null # keep kernel messages off the console

say() { printf '\n=== [%3ss] %s\n' "$(($(date +%s) - T0))" "$*"; }
indent() { sed 's/^/    /'; }
check() { # check OK|FAIL TEXT: a demo expectation, recorded
  if [ "$1" = OK ]; then echo "    ok: $2"; else echo "    FAIL: $2"; failed=1; fi
}
die() {
  echo "    FAIL: $*"
  echo "--- agent log (last 30 lines)"; tail -n 30 /tmp/agent.log 2>/dev/null | indent
  echo "DEMO-END"; exit 1
}
# wait_for SECS CMD...: poll CMD every 0.2s for at most SECS seconds.
wait_for() {
  n=$(($1 * 5)); shift
  while [ "$n" -gt 0 ]; do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.2; n=$((n - 1))
  done
  return 1
}

# netns NAME ADDR NODEADDR: a namespace joined to the node by a veth pair.
# Each side holds a /32 with a route to the other, so web-1 (10.244.1.2) and
# dns-1 (10.244.1.3) can share 10.244.1.1 as their node address on separate
# links. The default route points at the node: IPVS NAT replies return there.
netns() {
  $IP netns add "$1" &&
    $IP link add "v-$1" type veth peer name eth0 netns "$1" &&
    $IP addr add "$3/32" dev "v-$1" &&
    $IP link set "v-$1" up &&
    $IP route add "$2/32" dev "v-$1" src "$3" &&
    $IP -n "$1" link set lo up &&
    $IP -n "$1" addr add "$2/32" dev eth0 &&
    $IP -n "$1" link set eth0 up &&
    $IP -n "$1" route add "$3/32" dev eth0 scope link &&
    $IP -n "$1" route add default via "$3" dev eth0
}
# backend NAME ADDR NODEADDR PROTO PORT: an endpoint running the echo server.
backend() {
  netns "$1" "$2" "$3" || die "setting up namespace $1"
  $IP netns exec "$1" echo-server -name "$1" "-$4" ":$5" >"/tmp/$1.log" 2>&1 &
  echo "$1 $2 $4 $5" >>/tmp/backends
}
# backends_answer: each backend answers directly (not through IPVS yet).
backends_answer() {
  while read -r name addr proto port; do
    wait_for 20 probe "-$proto" "$addr:$port" -n 1 -timeout 500ms || die "$name does not answer on $proto $addr:$port"
    printf '    %-6s %-11s %s :%s\n' "$name" "$addr" "$proto" "$port"
  done </tmp/backends
}
exited() { # exited PID: gone, or a zombie waiting for us
  s=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)
  [ -z "$s" ] || [ "$s" = Z ]
}
in_client() { $IP netns exec client "$@"; }
weight_of() { # weight_of VIP:PORT RS:PORT
  ipvsadm -Ln -t "$1" 2>/dev/null | awk -v rs="$2" '$2 == rs { print $4 }'
}

say "backends: one network namespace per endpoint, each running the echo server"
backend web-1 10.244.1.2 10.244.1.1 tcp 8080
backend web-2 10.244.2.2 10.244.2.1 tcp 8080
backend web-3 10.244.3.2 10.244.3.1 tcp 8080
backend dns-1 10.244.1.3 10.244.1.1 udp 53
backend dns-2 10.244.2.3 10.244.2.1 udp 53
backends_answer
netns client 10.0.0.2 10.0.0.1 || die "setting up the client namespace"
echo "    client 10.0.0.2    routes via the node (10.0.0.1)"

say "kube-ipvs agent --manifests /examples --hostname-override node-a"
(cd /examples && ls *.yaml) | indent
t=$(date +%s)
# Debug level: the agent logs every operation it applies, ipvsadm-style.
kube-ipvs agent --manifests /examples --hostname-override node-a --log-level debug >/tmp/agent.log 2>&1 &
agent=$!
wait_for 60 sh -c 'ipvsadm -Ln | grep -q "10.96.0.100:80"' ||
  die "no virtual server for 10.96.0.100:80 after 60s"
# The whole folder is one sync; give it a moment to finish the other services.
wait_for 10 sh -c 'ipvsadm -Ln | grep -q "10.96.0.10:53"'
echo "    the agent programmed the table $(($(date +%s) - t))s after it started; VIPs bound through kube-ipvs0"
echo "    (local routes: ip route show table local dev kube-ipvs0 proto 243):"
for f in -4 -6; do $IP $f route show table local dev kube-ipvs0 proto 243; done | awk '$1 == "local" { print $2 }' | indent

say "ipvsadm -Ln"
ipvsadm -Ln | indent

say "probe -tcp 10.96.0.100:80 -n 9   (from the client: 9 new connections)"
out=$(in_client probe -tcp 10.96.0.100:80 -n 9); rc=$?
echo "$out" | indent
sum=$(echo "$out" | tail -n 1)
case "$rc $sum" in
*web-1=*web-2=*web-3=*failures=0) check OK "round robin reached web-1, web-2 and web-3" ;;
*) check FAIL "expected every web backend and no failure (probe exited $rc)" ;;
esac

say "probe -udp 10.96.0.10:53 -n 4   (4 new UDP flows)"
out=$(in_client probe -udp 10.96.0.10:53 -n 4); rc=$?
echo "$out" | indent
case "$rc $(echo "$out" | tail -n 1)" in
"0 dns-1="*" dns-2="*" failures=0") check OK "both dns backends answered" ;;
*) check FAIL "expected dns-1 and dns-2 and no failure (probe exited $rc)" ;;
esac

say "a long-lived connection from the client, kept open"
# busybox nc reads its input from a FIFO the demo writes to when it wants.
mkfifo /tmp/long.in
in_client nc 10.96.0.100 80 </tmp/long.in >/tmp/long.out 2>&1 &
exec 3>/tmp/long.in
echo first >&3
wait_for 5 grep -q ' first$' /tmp/long.out || die "the long-lived connection got no answer"
long=$(awk 'NR == 1 { print $1 }' /tmp/long.out) # web-N
addr=10.244.${long#web-}.2
sed 's/^/    < /' /tmp/long.out

say "live change: $long ($addr) starts terminating in web.yaml"
sed "/addresses: \[$addr\]/{n;s/{.*}/{ready: false, serving: true, terminating: true}/;}" \
  /examples/web.yaml >/examples/.web.yaml.new
diff -U1 /examples/web.yaml /examples/.web.yaml.new | sed -n '4,$p' | indent
logged=$(wc -l </tmp/agent.log)
mv /examples/.web.yaml.new /examples/web.yaml # one rename: the agent never sees half a file
t=$(date +%s)
drained() { [ "$(weight_of 10.96.0.100:80 "$addr:8080")" = 0 ]; }
wait_for 30 drained ||
  die "$long is not at weight 0 after 30s (weight: $(weight_of 10.96.0.100:80 "$addr:8080"))"
echo "    the agent set $long to weight 0 within $(($(date +%s) - t))s; its log:"
wait_for 5 sh -c "tail -n +$((logged + 1)) /tmp/agent.log | grep -q synced"
tail -n +$((logged + 1)) /tmp/agent.log | indent

say "ipvsadm -Ln -t 10.96.0.100:80"
ipvsadm -Ln -t 10.96.0.100:80 | indent

say "probe -tcp 10.96.0.100:80 -n 6   (new connections skip $long)"
out=$(in_client probe -tcp 10.96.0.100:80 -n 6); rc=$?
echo "$out" | indent
sum=$(echo "$out" | tail -n 1)
others=$(echo web-1 web-2 web-3 | tr ' ' '\n' | grep -vx "$long" | tr '\n' ' ')
case "$sum" in
*"$long="*) check FAIL "$long still takes new connections" ;;
*) if [ "$rc" = 0 ] && [ "$(echo "$sum" | grep -o 'web-[0-9]' | tr '\n' ' ')" = "$others" ]; then
  check OK "only $(echo $others | sed 's/ / and /') answered"
else
  check FAIL "expected $others and no failure (probe exited $rc)"
fi ;;
esac

say "the long-lived connection to $long goes on"
echo still-there >&3
wait_for 5 grep -q ' still-there$' /tmp/long.out
sed 's/^/    < /' /tmp/long.out
if grep -q ' still-there$' /tmp/long.out; then
  check OK "the established connection to $long still answers at weight 0"
else
  check FAIL "the long-lived connection stopped answering"
fi
exec 3>&-

# stop_agent: SIGTERM, and the agent must exit promptly.
stop_agent() {
  kill -TERM "$agent"
  if wait_for 15 exited "$agent"; then
    wait "$agent"; echo "    agent exited with status $?"
  else
    check FAIL "the agent did not exit within 15s of SIGTERM"; kill -KILL "$agent"
  fi
}

say "stopping the agent (SIGTERM)"
stop_agent
echo "    the table stays in place ($(ipvsadm -Ln | grep -c '^[TU]') virtual servers): traffic flows while the agent restarts"

say "restarting the agent against the table it left: nothing to do"
kube-ipvs agent --manifests /examples --hostname-override node-a --log-level debug >/tmp/agent2.log 2>&1 &
agent=$!
# Done once a sync has seen the services from the folder.
loaded() { grep 'synced' /tmp/agent2.log | grep -qv '"services": 0,'; }
wait_for 60 loaded || die "the restarted agent did not sync the folder within 60s"
grep -E 'synced|applied' /tmp/agent2.log | indent
ops=$(grep -o '"ops": [0-9]*' /tmp/agent2.log | awk '{ n += $2 } END { print n + 0 }')
if [ "$ops" = 0 ] && drained; then
  check OK "the restarted agent applied 0 operations; $long keeps weight 0"
else
  check FAIL "the restarted agent applied $ops operations to an unchanged table"
fi
stop_agent

if [ "$failed" = 0 ]; then say "demo: every check held"; else say "demo: FAILED (see above)"; fi
[ "$failed" = 0 ] || { echo "--- agent log (last 30 lines)"; tail -n 30 /tmp/agent.log | indent; }
echo "DEMO-END"
exit "$failed"
GUEST

echo "==> booting the VM (Debian cloud kernel with IPVS, qemu TCG); the demo runs inside"
set +e
"$root/scripts/vm/run.sh" --timeout "${KUBE_IPVS_VM_TIMEOUT:-300}" \
  --add "$work/kube-ipvs:/usr/local/bin/kube-ipvs" \
  --add "$work/echo:/usr/local/bin/echo-server" \
  --add "$work/probe:/usr/local/bin/probe" \
  --add "$root/examples:/examples" \
  --add "$work/guest.sh:/demo.sh" \
  -- sh /demo.sh >"$work/console.log" 2>&1 &
vm=$!
# Show the demo's own lines as they come; boot chatter stays in the log.
tail -n +1 -f --pid "$vm" "$work/console.log" | sed -un '/^=== \[/,/^DEMO-END$/{/^DEMO-END$/d;p}'
wait "$vm"
rc=$?
set -e
if ! grep -q '^DEMO-END$' "$work/console.log"; then
  echo "==> the demo did not finish; the VM console said:"
  tail -n 40 "$work/console.log"
fi
echo "==> demo exited $rc after $(($(date +%s) - start))s"
exit "$rc"
