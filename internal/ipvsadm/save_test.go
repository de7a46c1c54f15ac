package ipvsadm

import (
	"os"
	"strings"
	"testing"
)

// A table saved by ipvsadm -Sn (this package's save.golden, as ipvsadm
// 1.31 prints it) reads back as the model holds it: every service and real
// server, with what the model keeps of their options.
func TestParseSaveGolden(t *testing.T) {
	data, err := os.ReadFile("testdata/save.golden")
	if err != nil {
		t.Fatal(err)
	}
	_, saved, _ := strings.Cut(string(data), "\n") // the golden's "$ ipvsadm -S -n"
	st, err := ParseSave([]byte(saved))
	if err != nil {
		t.Fatal(err)
	}
	want := `-A -t 10.96.0.1:80 -s wlc -p 10800
  -a -t 10.96.0.1:80 -r 10.244.1.5:8080 -m -w 3
  -a -t 10.96.0.1:80 -r 10.244.1.6:80 -g -w 1
  -a -t 10.96.0.1:80 -r 10.244.1.7:80 -i -w 1
  -a -t 10.96.0.1:80 -r 10.244.1.8:80 -i -w 1
  -a -t 10.96.0.1:80 -r 10.244.1.9:80 -i -w 1
  -a -t 10.96.0.1:80 -r 127.0.0.1:80 -g -w 1
-A -u 10.96.0.10:53 -s rr -o
  -a -u 10.96.0.10:53 -r 10.244.1.5:53 -m -w 1
  -a -u 10.96.0.10:53 -r 10.244.2.7:53 -m -w 1
-A --sctp-service 10.96.0.20:5060 -s mh -p 60 -b mh-port
  -a --sctp-service 10.96.0.20:5060 -r 10.244.4.4:5060 -m -w 65535
-A -t 10.96.0.30:0 -s nq -p 1
-A -t 192.168.10.1:443 -s sh -b sh-fallback,sh-port
  -a -t 192.168.10.1:443 -r 10.244.1.5:8443 -m -w 1
  -a -t 192.168.10.1:443 -r 10.244.3.9:8443 -m -w 0
-A -t [fd00:10:96::1]:443 -s lc -p 300
  -a -t [fd00:10:96::1]:443 -r [fd00:10:244:1::4]:6443 -m -w 0
  -a -t [fd00:10:96::1]:443 -r [fd00:10:244:1::5]:6443 -m -w 1
-A -u [fd00:10:96::a]:53 -s wrr -b flag-3
  -a -u [fd00:10:96::a]:53 -r [fd00:10:244:2::7]:53 -m -w 2
-A -f 3 -s sed -p 3600
  -a -f 3 -r [fd00::1:2]:0 -g -w 1
-A -f 7 -s rr
  -a -f 7 -r 10.244.5.5:0 -g -w 1
`
	if got := st.Dump(); got != want {
		t.Errorf("read back\n%s\nwant\n%s", got, want)
	}
}

// A line ParseSave cannot read is refused with its number and what is
// wrong, never skipped: a preview against half a table would plan to add
// what is there.
func TestParseSaveRefuses(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"-A -t web.example:http -s rr\n", `line 1: "-A -t web.example:http -s rr": service address "web.example:http": want IP:PORT`},
		{"-a -t 10.0.0.1:80 -r 10.1.0.1:80 -m -w 1\n", "line 1: \"-a -t 10.0.0.1:80 -r 10.1.0.1:80 -m -w 1\": real server of -t 10.0.0.1:80 before its -A line"},
		{"-A -t 10.0.0.1:80 -s rr\n\n-A -t 10.0.0.1:80 -s wrr\n", "line 3:"},
		{"-A -t 10.0.0.1:80 -s rr --frob 1\n", `unknown service option "--frob"`},
		{"-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -m -w 1\n", "line 2:"},
		{"-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 10.1.0.1:80 -w many\n", `-w "many"`},
		{"-E -t 10.0.0.1:80 -s rr\n", `want -A or -a, got "-E"`},
		{"-A -f 0 -s rr\n", "firewall mark"},
		{"-A -t 10.0.0.1:80 -s sh -b sh-sideways\n", `unknown scheduler flag "sh-sideways"`},
	} {
		_, err := ParseSave([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to contain %q", tc.in, err, tc.want)
		}
	}
}
