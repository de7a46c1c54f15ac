package dataplane

import "testing"

func TestConnReuseFor(t *testing.T) {
	tests := []struct {
		release string
		want    ConnReusePolicy
	}{
		{"3.10.0-1160.el7.x86_64", ConnReuseUnsupported},
		{"4.0.9", ConnReuseUnsupported},
		{"4.1", ConnReuseSetZero},
		{"4.1.0-generic", ConnReuseSetZero},
		{"4.19.0-17-amd64", ConnReuseSetZero},
		{"5.4.0-150-generic", ConnReuseSetZero},
		{"5.8.18", ConnReuseSetZero},
		{"5.9.0", ConnReuseLeave},
		{"5.10.0-28-cloud-amd64", ConnReuseLeave},
		{"6.12.43+deb13-cloud-amd64", ConnReuseLeave},
		{"6.18.44-fc-v782", ConnReuseLeave},
		{"10.0", ConnReuseLeave},
	}
	for _, tc := range tests {
		v, err := ParseKernelVersion(tc.release)
		if err != nil {
			t.Errorf("ParseKernelVersion(%q): %v", tc.release, err)
			continue
		}
		if got := ConnReuseFor(v); got != tc.want {
			t.Errorf("ConnReuseFor(%q = %s) = %d, want %d", tc.release, v, got, tc.want)
		}
	}
}

func TestParseKernelVersion(t *testing.T) {
	tests := []struct {
		release string
		want    KernelVersion
		wantErr bool
	}{
		{release: "6.12.43+deb13-cloud-amd64", want: KernelVersion{6, 12, 43}},
		{release: "5.15.0-91-generic\n", want: KernelVersion{5, 15, 0}},
		{release: "4.19", want: KernelVersion{4, 19, 0}},
		{release: "6.1.0.7-x", want: KernelVersion{6, 1, 0}},
		{release: "6-rc1", wantErr: true},
		{release: "", wantErr: true},
		{release: "linux", wantErr: true},
	}
	for _, tc := range tests {
		got, err := ParseKernelVersion(tc.release)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseKernelVersion(%q) = %v, %v; want %v, error=%v", tc.release, got, err, tc.want, tc.wantErr)
		}
	}
}
