package host

import (
	"strings"
	"testing"
)

func TestEndpointPlaces(t *testing.T) {
	mounts := []Mount{{Subdir: "kernel", Target: "/kernel"}, {Subdir: "in", Target: "/in", ReadOnly: true}, {Subdir: "", Target: "/forge/ws"}}
	for _, tc := range []struct {
		name string
		eps  []Endpoint
		want map[string]string
		err  string
	}{
		{"socket in a mount", []Endpoint{{"shell", "/kernel/k-1"}}, map[string]string{"shell": "kernel/k-1"}, ""},
		{"workspace root mount", []Endpoint{{"r", "/forge/ws/chan/s"}}, map[string]string{"r": "chan/s"}, ""},
		{"several", []Endpoint{{"a", "/kernel/a"}, {"b-2", "/kernel/sub/b"}}, map[string]string{"a": "kernel/a", "b-2": "kernel/sub/b"}, ""},
		{"the target itself", []Endpoint{{"a", "/kernel"}}, nil, "not beneath"},
		{"outside every mount", []Endpoint{{"a", "/tmp/s"}}, nil, "not beneath"},
		{"a prefix that is not a parent", []Endpoint{{"a", "/kernelx/s"}}, nil, "not beneath"},
		{"read-only mount", []Endpoint{{"a", "/in/s"}}, nil, "writable"},
		{"dot-dot", []Endpoint{{"a", "/kernel/../etc/s"}}, nil, "clean absolute"},
		{"relative", []Endpoint{{"a", "kernel/s"}}, nil, "clean absolute"},
		{"bad name", []Endpoint{{"Shell", "/kernel/s"}}, nil, "lower-case"},
		{"name too long", []Endpoint{{strings.Repeat("a", 33), "/kernel/s"}}, nil, "lower-case"},
		{"duplicate", []Endpoint{{"a", "/kernel/s"}, {"a", "/kernel/t"}}, nil, "twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := EndpointPlaces(Intent{Mounts: mounts, Endpoints: tc.eps})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v; want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
}
