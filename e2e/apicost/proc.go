package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

// userHZ is the unit of /proc/<pid>/stat's times: USER_HZ, 100 on Linux.
const userHZ = 100

// procCPU is a process's user + system CPU so far, from /proc.
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read the API server's CPU: %w", err)
	}
	// The command may hold spaces and parentheses: fields count from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command", pid, len(f))
	}
	// utime and stime are the stat's fields 14 and 15, 12 and 13 after the command.
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return float64(ut+st) / userHZ, nil
}

// idleRate is the API server's CPU per second while nothing asks it anything.
func idleRate(pid int, over time.Duration) (float64, error) {
	a, err := procCPU(pid)
	if err != nil {
		return 0, err
	}
	time.Sleep(over)
	b, err := procCPU(pid)
	if err != nil {
		return 0, err
	}
	return (b - a) / over.Seconds(), nil
}

// verbCount is the API server's own count of requests for the watched
// resources: LIST requests completed, and WATCH requests open (watches
// are counted as completed only when they end).
type verbCount struct {
	List  float64 `json:"list"`
	Watch float64 `json:"watch_open"`
}

func (v verbCount) minus(o verbCount) verbCount {
	return verbCount{List: v.List - o.List, Watch: v.Watch - o.Watch}
}

var watched = map[string]bool{`resource="services"`: true, `resource="endpointslices"`: true, `resource="nodes"`: true}

// apiRequests reads the counts from the API server's metrics.
func apiRequests(ctx context.Context, cs kubernetes.Interface) (verbCount, error) {
	b, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return verbCount{}, fmt.Errorf("read the API server's metrics: %w", err)
	}
	var v verbCount
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var dst *float64
		switch {
		case strings.HasPrefix(line, "apiserver_request_total{") && strings.Contains(line, `verb="LIST"`):
			dst = &v.List
		case strings.HasPrefix(line, "apiserver_longrunning_requests{") && strings.Contains(line, `verb="WATCH"`):
			dst = &v.Watch
		default:
			continue
		}
		lo, hi := strings.IndexByte(line, '{'), strings.LastIndexByte(line, '}')
		if lo < 0 || hi < lo {
			continue
		}
		found := false
		for _, l := range strings.Split(line[lo+1:hi], ",") {
			found = found || watched[l]
		}
		if !found {
			continue
		}
		x, err := strconv.ParseFloat(strings.TrimSpace(line[hi+1:]), 64)
		if err != nil {
			continue
		}
		*dst += x
	}
	return v, sc.Err()
}
