#!/bin/sh
# ipvsadm-vm.sh: prove `kube-ipvs ipvsadm ARGS` prints exactly what the real
# ipvsadm 1.31 prints, on a real IPVS kernel in a throwaway VM.
#
#   scripts/ipvsadm-vm.sh
#
# On the host it builds kube-ipvs statically and boots the VM (scripts/vm/run.sh)
# with itself as the guest command. In the guest (KUBE_IPVS_VM=1) it builds a
# table with the real ipvsadm (IPv4 and IPv6; TCP, UDP, SCTP and fwmark
# services; schedulers with flags; persistence with netmasks and an engine;
# weights 0 and 1; thresholds; direct routing and tunnels; a few live
# connections), then runs both tools for every listing option set and diffs
# stdout, stderr and exit status. Prints every difference; exits 1 on any, 0
# when all match (125 when the VM itself failed).
set -u

if [ "${KUBE_IPVS_VM:-}" != 1 ]; then
  set -e
  here=$(cd "$(dirname "$0")" && pwd)
  root=$(cd "$here/.." && pwd)
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  (cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$work/kube-ipvs" ./cmd/kube-ipvs)
  # not exec: the trap must still remove the binary
  status=0
  "$here/vm/run.sh" --timeout "${KUBE_IPVS_VM_TIMEOUT:-600}" \
    --add "$work/kube-ipvs:/usr/local/bin/kube-ipvs" \
    --add "$here/ipvsadm-vm.sh:/usr/local/bin/ipvsadm-vm.sh" \
    -- /usr/local/bin/ipvsadm-vm.sh || status=$?
  exit $status
fi

# ---------------------------------------------------------------- guest side
IP=/usr/sbin/iproute2-ip
fail=0

mine() { # run kube-ipvs' ipvsadm with the given arguments
  if [ -n "${VIA_LINK:-}" ]; then
    "$VIA_LINK" "$@"
  else
    kube-ipvs ipvsadm "$@"
  fi
}

must() { "$@" || { echo "setup failed: $*"; fail=1; }; }
try() { "$@" 2>/dev/null || echo "setup skipped (unsupported here): $*"; }

# --- the table ---------------------------------------------------------------
try modprobe ip_vs_pe_sip
must ipvsadm -A -t 10.96.0.1:443 -s rr
must ipvsadm -a -t 10.96.0.1:443 -r 10.244.1.5:6443 -m -w 1
must ipvsadm -a -t 10.96.0.1:443 -r 10.244.2.5:6443 -m -w 0
must ipvsadm -a -t 10.96.0.1:443 -r 10.244.0.9:6443 -m -w 1
must ipvsadm -A -u 10.96.0.10:53 -s wrr -o
must ipvsadm -a -u 10.96.0.10:53 -r 10.244.1.7:53 -m -w 1
must ipvsadm -a -u 10.96.0.10:53 -r 10.244.2.7:53 -m -w 1 -x 100 -y 50
must ipvsadm -A -t 10.96.0.10:53 -s rr
must ipvsadm -a -t 10.96.0.10:53 -r 10.244.1.7:53 -m -w 1
must ipvsadm -A -t 192.168.50.1:80 -s sh -b sh-fallback,sh-port
must ipvsadm -a -t 192.168.50.1:80 -r 10.244.3.3:8080 -m -w 1 -x 1000 -y 10
must ipvsadm -a -t 192.168.50.1:80 -r 10.244.3.4 -g -w 2
must ipvsadm -a -t 192.168.50.1:80 -r 10.244.3.5 -i -w 1
try ipvsadm -a -t 192.168.50.1:80 -r 10.244.3.6 -i -w 1 --tun-type gue --tun-port 6080 --tun-csum
try ipvsadm -a -t 192.168.50.1:80 -r 10.244.3.7 -i -w 1 --tun-type gre --tun-nocsum
must ipvsadm -A -t 10.96.0.20:8080 -s wlc -p 600 -M 255.255.255.0
must ipvsadm -a -t 10.96.0.20:8080 -r 10.244.4.4:8080 -m
must ipvsadm -A --sctp-service 10.96.0.30:3868 -s mh -b mh-port
must ipvsadm -a --sctp-service 10.96.0.30:3868 -r 10.244.5.5:3868 -m -w 3
must ipvsadm -A -f 7 -s lc
must ipvsadm -a -f 7 -r 10.244.6.6 -g -w 1
must ipvsadm -A -f 9 -6 -s sed -p 60
must ipvsadm -a -f 9 -6 -r fd00:10:244::9 -g -w 1
must ipvsadm -A -t [fd00:10:96::1]:443 -s lc -p 300 -M 64
must ipvsadm -a -t [fd00:10:96::1]:443 -r [fd00:10:244:1::5]:6443 -m -w 1
must ipvsadm -a -t [fd00:10:96::1]:443 -r [fd00:10:244:1::6]:6443 -m -w 0
must ipvsadm -A -u [fd00:10:96::a]:53 -s rr -o
must ipvsadm -a -u [fd00:10:96::a]:53 -r [fd00:10:244:2::7]:53 -m -w 1
must ipvsadm -A -t 10.0.0.1:80 -s rr -b flag-1,flag-3
must ipvsadm -a -t 10.0.0.1:80 -r 10.0.0.2:8080 -m -w 65535
must ipvsadm -A -t 10.96.0.50:0 -s nq -p
try ipvsadm -A -u 10.96.0.40:5060 -s rr -p 30 --pe sip
try ipvsadm -a -u 10.96.0.40:5060 -r 10.244.7.7:5060 -m -w 1
must ipvsadm --set 901 121 301

# names for the listings without -n (the guest resolves from files only)
cat >>/etc/hosts <<'EOF'
10.96.0.1 kubernetes.default.svc.cluster.local kubernetes
10.244.1.5 pod-a
fd00:10:96::1 api6
EOF

# --- a few live connections: locally originated traffic to the VIPs, routed
# into a dummy link (no replies: the entries stay in their first state) -------
must $IP link add kipvs-sink type dummy
must $IP link set kipvs-sink up
must $IP route add 10.244.0.0/16 dev kipvs-sink
must $IP -6 route add fd00:10:244::/48 dev kipvs-sink
must $IP link add kube-ipvs0 type dummy
for vip in 10.96.0.1 10.96.0.10 10.96.0.20; do must $IP addr add $vip/32 dev kube-ipvs0; done
must $IP addr add fd00:10:96::1/128 dev kube-ipvs0 nodad
for i in 1 2 3; do (nc -w 1 10.96.0.1 443 </dev/null >/dev/null 2>&1 &); done
(nc -w 1 10.96.0.20 8080 </dev/null >/dev/null 2>&1 &)
(echo query | nc -u -w 1 10.96.0.10 53 >/dev/null 2>&1 &)
(nc -w 1 fd00:10:96::1 443 </dev/null >/dev/null 2>&1 &)
sleep 3

echo "--- the table (real ipvsadm -Ln --stats):"
ipvsadm -Ln --stats
echo "--- connections (real ipvsadm -Lnc):"
ipvsadm -Lnc

# --- compare -----------------------------------------------------------------
n=0
compare() { # ARGS...: same stdout, stderr and status from both tools
  n=$((n + 1))
  tries=0
  while :; do
    # Ours, the real one, ours again: a connection's expiry or a rate
    # estimate may tick between two runs (the emulated VM is slow and the
    # host is shared), so the real output must equal ours taken just before
    # or just after it, byte for byte.
    for run in before real after; do
      if [ $run = real ]; then ipvsadm "$@"; else mine "$@"; fi >/tmp/$run.out 2>/tmp/$run.err
      echo "status $?" >>/tmp/$run.err
    done
    for mine in before after; do
      if cmp -s /tmp/real.out /tmp/$mine.out && cmp -s /tmp/real.err /tmp/$mine.err; then
        echo "same   ipvsadm $*"
        return
      fi
    done
    tries=$((tries + 1))
    [ $tries -lt 5 ] || break
  done
  cp /tmp/after.out /tmp/mine.out; cp /tmp/after.err /tmp/mine.err
  echo "DIFF   ipvsadm $*"
  diff -u /tmp/real.out /tmp/mine.out | sed 's/^/       /'
  diff -u /tmp/real.err /tmp/mine.err | sed 's/^/       /'
  fail=1
}

compare
compare -L
compare -l
compare -Ln
compare -L -n
compare --list --numeric
compare -Ln --stats
compare -Ln --stats --exact
compare -L --stats
compare -Ln --rate
compare -Ln --rate --exact
compare -Ln --thresholds
compare -Ln --persistent-conn
compare -L --persistent-conn
compare -Ln --tun-info
compare -Ln --nosort
compare -Ln --sort
compare -L --timeout
compare -L --daemon
compare -Lnc
compare -Lc
compare -Lnc --persistent-conn
compare -S -n
compare -Sn
compare -S
compare -Ln -t 10.96.0.1:443
compare -L -t 10.96.0.1:https
compare -Ln -u 10.96.0.10:53 --stats
compare -Ln -u 10.96.0.10:domain --rate
compare -Ln --sctp-service 10.96.0.30:3868
compare -Ln -f 7
compare -Ln -f 9 -6
compare -Ln -t [fd00:10:96::1]:443 --thresholds
compare -Ln -u [fd00:10:96::a]:53 --persistent-conn
compare -Ln -t 10.96.0.50
compare -Ln -t 10.9.9.9:80
compare -n -L
compare -L -c --timeout
compare -L -c --stats
compare -L -n -n
compare -L -s rr
compare -S --stats

# the same binary through a link named ipvsadm
mkdir -p /opt/kube-ipvs && ln -sf /usr/local/bin/kube-ipvs /opt/kube-ipvs/ipvsadm
VIA_LINK=/opt/kube-ipvs/ipvsadm
compare -Ln
compare -Ln --stats --exact
compare -Sn
VIA_LINK=

# --- refusals change nothing ---------------------------------------------------
ipvsadm -Sn >/tmp/before
for args in "-A -t 10.1.1.1:80 -s rr" "-D -t 10.96.0.1:443" "-C" "-Z" "--set 1 2 3" \
  "-a -t 10.96.0.1:443 -r 10.244.9.9:6443 -m" "-L -d -t 10.96.0.1:443 -r 10.244.1.5:6443"; do
  n=$((n + 1))
  # shellcheck disable=SC2086 # word splitting wanted
  mine $args >/dev/null 2>/tmp/mine.err
  status=$?
  if [ $status -eq 2 ] && grep -q agent /tmp/mine.err; then
    echo "refused ipvsadm $args"
  else
    echo "DIFF   ipvsadm $args: status $status, stderr: $(cat /tmp/mine.err)"
    fail=1
  fi
done
ipvsadm -Sn >/tmp/after
if ! cmp -s /tmp/before /tmp/after; then
  echo "DIFF   a refused command changed the table:"
  diff -u /tmp/before /tmp/after | sed 's/^/       /'
  fail=1
fi
ipvsadm -L --timeout | grep -q '901 121 301' || { echo "DIFF   a refused --set changed the timeouts"; fail=1; }

echo "ipvsadm-vm: $n checks, $([ $fail = 0 ] && echo 'all identical' || echo 'DIFFERENCES above')"
exit $fail
