#!/bin/sh
# smoke.sh: proves the VM harness gives a real IPVS kernel and working tools.
# On the host it boots the VM via run.sh with itself as the guest command; in the
# guest (KUBE_IPVS_VM=1) it programs a virtual server and checks what the kernel
# reports. Exits 0 when every check passes, 1 otherwise.
set -u

if [ "${KUBE_IPVS_VM:-}" != 1 ]; then
  here=$(cd "$(dirname "$0")" && pwd)
  exec "$here/run.sh" --timeout 300 --add "$here/smoke.sh:/usr/local/bin/smoke.sh" -- /usr/local/bin/smoke.sh
fi

fail=0
check() { # $1 description, rest: command that must succeed
  what=$1
  shift
  if "$@" >/tmp/check.out 2>&1; then
    echo "ok   $what"
  else
    echo "FAIL $what"
    sed 's/^/     /' /tmp/check.out
    fail=1
  fi
}
contains() { # $1 file, $2 fixed string
  grep -qF -- "$2" "$1" || { echo "missing: $2"; cat "$1"; return 1; }
}

IP=/usr/sbin/iproute2-ip
check "dummy link kube-ipvs0" $IP link add kube-ipvs0 type dummy
check "VIP on kube-ipvs0" $IP addr add 10.96.0.10/32 dev kube-ipvs0
check "virtual server" ipvsadm -A -t 10.96.0.10:80 -s rr
check "real server" ipvsadm -a -t 10.96.0.10:80 -r 10.244.0.2:8080 -m -w 1
ipvsadm -Ln >/tmp/ipvs.out 2>&1
cat /tmp/ipvs.out
check "ipvsadm lists the service" contains /tmp/ipvs.out "TCP  10.96.0.10:80 rr"
check "ipvsadm lists the backend" grep -Eq -- '-> 10\.244\.0\.2:8080 +Masq +1 ' /tmp/ipvs.out
check "/proc/net/ip_vs has the service" contains /proc/net/ip_vs "0A60000A:0050 rr"
check "VIP address present" sh -c "$IP -o addr show dev kube-ipvs0 | grep -q 10.96.0.10/32"
check "network namespace" $IP netns add smoke
check "ipset hash:ip,port" sh -c 'ipset create smoke-set hash:ip,port && ipset add smoke-set 10.96.0.10,tcp:80 && ipset test smoke-set 10.96.0.10,tcp:80'
check "iptables -m ipvs MASQUERADE" iptables -t nat -A POSTROUTING -m ipvs --vaddr 10.96.0.10/32 --vport 80 -j MASQUERADE
check "iptables -m set" iptables -t filter -A INPUT -m set --match-set smoke-set dst,dst -j ACCEPT
check "iptables-save shows the rules" sh -c 'iptables-save | grep -q -- "--vaddr 10.96.0.10"'
check "conntrack netlink" conntrack -L
exit $fail
