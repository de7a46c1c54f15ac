package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ: /proc/PID/stat counts CPU time in these on Linux.
const clockTicks = 100

// cpuSeconds is the process' user+system time, with that of the children
// it waited for (kube-proxy runs iptables-restore and ipset, and the agent
// its own helpers: their work is the tool's work).
func cpuSeconds(pid int) (float64, error) {
	user, system, err := cpuSplit(pid)
	return user + system, err
}

// cpuSplit is cpuSeconds in its two parts: user time, and system time, the
// kernel's work in the process' system calls (a netlink request's is
// done there).
func cpuSplit(pid int) (user, system float64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("read CPU time of %d: %w", pid, err)
	}
	return parseStatCPU(data)
}

// parseStatCPU reads fields 14-17 (utime stime cutime cstime) of a stat
// line as user and system seconds; the command name (field 2) may hold
// spaces, so count from its ')'.
func parseStatCPU(stat []byte) (user, system float64, err error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("stat line without a command name: %q", stat)
	}
	f := strings.Fields(string(stat[i+1:]))
	// f[0] is field 3 (state): utime is field 14, f[11].
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("stat line with %d fields after the name", len(f))
	}
	var ticks [4]uint64
	for k, s := range f[11:15] {
		if ticks[k], err = strconv.ParseUint(s, 10, 64); err != nil {
			return 0, 0, fmt.Errorf("stat field %q: %w", s, err)
		}
	}
	return float64(ticks[0]+ticks[2]) / clockTicks, float64(ticks[1]+ticks[3]) / clockTicks, nil
}

// peakRSSMB is VmHWM, the process' peak resident set, in MB.
func peakRSSMB(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read peak RSS of %d: %w", pid, err)
	}
	defer f.Close()
	return parseHWM(f)
}

func parseHWM(f interface{ Read([]byte) (int, error) }) (float64, error) {
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != "VmHWM" {
			continue
		}
		kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		if err != nil {
			return 0, fmt.Errorf("VmHWM %q: %w", v, err)
		}
		return kb / 1024, nil
	}
	return 0, fmt.Errorf("no VmHWM in status")
}
