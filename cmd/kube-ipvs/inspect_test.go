package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// streamOps answers a diff of n bytes or more, in chunks, as an agent
// gone wrong (or another server on the address) could.
func streamOps(n int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"ops": [`)
		line := strings.Repeat(`"-a -t 10.96.0.1:80 -r 10.244.1.2:8080 -m -w 1",`, 1000)
		for sent := 0; sent < n; sent += len(line) {
			if _, err := io.WriteString(w, line); err != nil {
				return
			}
		}
		io.WriteString(w, `"-D -t 10.96.0.1:80"]}`)
	})
}

// The status and diff commands read a bounded answer: one over the cap is
// refused, not read to its end.
func TestDiffReadsABoundedAnswer(t *testing.T) {
	tests := []struct {
		name   string
		size   int
		code   int
		stderr string
	}{
		{"an answer under the cap is printed", 1 << 20, 1, ""},
		{"an answer over the cap is refused", maxAnswerBytes + 1<<20, 2, fmt.Sprintf("over the %d bytes read", maxAnswerBytes)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(streamOps(tt.size))
			defer srv.Close()
			var stdout, stderr bytes.Buffer
			addr := strings.TrimPrefix(srv.URL, "http://")
			code := runDiff(context.Background(), []string{"-address", addr}, &stdout, &stderr)
			if code != tt.code || !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr.String(), tt.code, tt.stderr)
			}
			if tt.code == 1 && !strings.HasSuffix(stdout.String(), "-D -t 10.96.0.1:80\n") {
				t.Errorf("printed %d bytes not ending in the last op", stdout.Len())
			}
			if tt.code == 2 && stdout.Len() != 0 {
				t.Errorf("printed %d bytes of a refused answer", stdout.Len())
			}
		})
	}
}
