package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/agent"
	"github.com/kube-ipvs/kube-ipvs/internal/config"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/fake"
)

// kernelAfter parses args as the agent does, then runs it once on a fake
// kernel through the whole path the real agent takes, and returns the
// configuration and everything the kernel then holds, with the kernel
// settings beyond the table. The source is a folder of Services in place of
// the API server the configuration names (a cluster source and a folder
// cannot be combined on the command line).
func kernelAfter(t *testing.T, args ...string) (config.Config, string) {
	t.Helper()
	args = append(args, "--hostname-override=node-a")
	o, code := parseAgent(args, io.Discard, io.Discard)
	if code >= 0 {
		t.Fatalf("agent %q: exit %d", args, code)
	}
	c := o.Config
	c.Kubeconfig, c.ManifestsDir, c.Once = "", "testdata/kubeadm-services", true
	k := fake.New()
	if err := agent.Run(context.Background(), agent.Options{Config: c, Kernel: k, Log: zap.NewNop(), Stdout: io.Discard}); err != nil {
		t.Fatalf("agent %q: %v", args, err)
	}
	dp := agent.KernelOptions(c, nil)
	sh := k.ShimConfig()
	return o.Config, fmt.Sprintf("%s\ntimeouts %+v\nsysctls %v\nshim families %v masquerade-all %v pod CIDRs %v pod interface %q mark %#x\nstrict ARP %v, iptables %q, conntrack %+v\n",
		k.Dump(), k.Timeouts(), k.Sysctls(), sh.Families, sh.MasqueradeAll, sh.PodCIDRs, sh.PodInterface, sh.MasqueradeMark, dp.StrictARP, dp.IptablesBackend, dp.Conntrack)
}

// tunedFlags are the flags that say what kubeadm-v1.37.2-ipvs-tuned.conf
// says, one a line (the e2e/cluster VM test runs them too).
func tunedFlags(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("../../internal/config/testdata/kubeadm-v1.37.2-ipvs-tuned.flags")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(data))
}

// The KubeProxyConfiguration kubeadm v1.37 writes for IPVS (as it is, and
// with the IPVS settings a user tunes, internal/config/testdata) programs
// the same kernel as the same settings given as kube-proxy's flags.
func TestKubeadmConfigProgramsWhatItsFlagsDo(t *testing.T) {
	kubeadm := []string{"--proxy-mode=ipvs", "--kubeconfig=/var/lib/kube-proxy/kubeconfig.conf"}
	for _, tc := range []struct {
		file  string
		flags []string
	}{
		// kubeadm writes ipvs.minSyncPeriod 0s, which kube-proxy keeps;
		// the flag's default is 1s.
		{"kubeadm-v1.37.2-ipvs.conf", append(kubeadm, "--cluster-cidr=10.244.0.0/16", "--ipvs-min-sync-period=0s")},
		{"kubeadm-v1.37.2-ipvs-tuned.conf", tunedFlags(t)},
	} {
		t.Run(tc.file, func(t *testing.T) {
			fileConfig, fromFile := kernelAfter(t, "--config=../../internal/config/testdata/"+tc.file)
			flagsConfig, fromFlags := kernelAfter(t, tc.flags...)
			if !reflect.DeepEqual(fileConfig, flagsConfig) {
				t.Errorf("configuration\nfile  %+v\nflags %+v", fileConfig, flagsConfig)
			}
			if fromFile != fromFlags {
				t.Errorf("the file and the flags program different kernels\nfile:\n%s\nflags:\n%s", fromFile, fromFlags)
			}
			// ipvs.excludeCIDRs guards other tools' virtual servers from
			// deletion; Services there are served, as kube-proxy serves them.
			if !strings.Contains(fromFile, "-u 10.96.0.10:53") || !strings.Contains(fromFile, "-A -t 192.0.2.50:80") {
				t.Errorf("want the Services programmed, the external IP inside ipvs.excludeCIDRs too:\n%s", fromFile)
			}
		})
	}
	// The settings reach the kernel: the tuned file's differs from the plain one's.
	_, plain := kernelAfter(t, "--config=../../internal/config/testdata/kubeadm-v1.37.2-ipvs.conf")
	_, tuned := kernelAfter(t, "--config=../../internal/config/testdata/kubeadm-v1.37.2-ipvs-tuned.conf")
	for _, want := range []string{"-s lc", "TCP:10m0s", "masquerade-all true", "strict ARP true", "192.168.122.10:30080"} {
		if strings.Contains(plain, want) || !strings.Contains(tuned, want) {
			t.Errorf("%q: want it in the tuned kernel only\nplain:\n%s\ntuned:\n%s", want, plain, tuned)
		}
	}
}
