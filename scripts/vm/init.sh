#!/bin/sh
# /init of the throwaway IPVS VM (copied into the base initramfs by prepare.sh).
# Sets up a minimal system, loads the networking modules, runs /run-this from
# the payload archive within a time bound, prints the exit marker that run.sh
# looks for, and powers off.
export PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts 2>/dev/null
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mkdir -p /run/netns /var/run
ln -sf /proc/self/fd /dev/fd 2>/dev/null
hostname kube-ipvs-vm

# Settings from run.sh (command time bound, network, user --env values).
[ -f /etc/kube-ipvs-vm/env ] && . /etc/kube-ipvs-vm/env

# Modules: IPVS with every scheduler, the links tests build topologies from, and
# the netfilter pieces kube-proxy-style rules use. Missing ones are skipped quietly.
for m in ip_vs ip_vs_rr ip_vs_wrr ip_vs_lc ip_vs_wlc ip_vs_lblc ip_vs_lblcr \
  ip_vs_dh ip_vs_sh ip_vs_sed ip_vs_nq ip_vs_mh ip_vs_fo ip_vs_ovf ip_vs_twos \
  ip_vs_ftp dummy veth nf_conntrack nf_conntrack_netlink nf_nat nf_tables nft_compat \
  nft_chain_nat nft_nat nft_masq nft_ct nft_reject nft_reject_inet nft_fib_inet \
  ip_set ip_set_hash_ip ip_set_hash_ipport ip_set_hash_ipportip ip_set_hash_ipportnet \
  ip_set_hash_net ip_set_hash_netport ip_set_hash_netiface ip_set_hash_ipmark \
  ip_set_hash_netnet ip_set_hash_netportnet ip_set_hash_ipmac ip_set_hash_mac \
  ip_set_bitmap_port ip_set_bitmap_ip ip_set_list_set \
  xt_set xt_ipvs xt_MASQUERADE xt_nat xt_conntrack xt_mark xt_comment xt_addrtype \
  xt_multiport xt_tcpudp xt_statistic xt_physdev xt_CT xt_REJECT ipt_REJECT ip6t_REJECT \
  xt_state xt_limit xt_NFLOG nf_log_syslog; do
  modprobe -q "$m" 2>/dev/null
done

ip link set lo up

if [ "${KUBE_IPVS_VM_NET:-0}" = 1 ]; then
  modprobe -q virtio_pci
  modprobe -q virtio_net
  i=0
  while [ ! -e /sys/class/net/eth0 ] && [ $i -lt 100 ]; do
    sleep 0.1
    i=$((i + 1))
  done
  if [ -e /sys/class/net/eth0 ]; then
    /usr/sbin/ip link set eth0 up
    /usr/sbin/ip addr add 10.0.2.15/24 dev eth0
    # The user-net gateway; with restrict=on it reaches nothing, but agents
    # that pick the node IP from the default route need one.
    /usr/sbin/ip route add default via 10.0.2.2 dev eth0
  else
    echo "KUBE-IPVS-VM: eth0 did not appear; network not configured"
  fi
fi

limit=${KUBE_IPVS_VM_CMD_TIMEOUT:-570}
start=$(date +%s)
cd /root
if [ -x /run-this ]; then
  timeout -s TERM -k 10 "$limit" /run-this </dev/console
  rc=$?
else
  echo "KUBE-IPVS-VM: no /run-this in the payload"
  rc=127
fi
if [ $(($(date +%s) - start)) -ge "$limit" ]; then
  echo "KUBE-IPVS-VM: guest command timed out after ${limit}s (status $rc)"
  rc=124
fi
sync
echo "KUBE-IPVS-VM-EXIT=$rc"
poweroff -f
# If poweroff failed, exiting init panics the kernel; panic=-1 with qemu's
# -no-reboot then ends the VM.
exit "$rc"
