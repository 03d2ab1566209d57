package mountinfo

import (
	"strings"
	"testing"
)

func TestParseMountinfo(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Entry
		wantErr string
	}{
		{"plain", "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard\n",
			[]Entry{{Major: 254, Minor: 0, Root: "/", MountPoint: "/", FSType: "ext4", Source: "/dev/vda", SuperOptions: "rw,discard"}}, ""},
		{"optional fields and escapes", `90 27 7:3 / /var/lib/x/sessions/a\040b\012c\134d rw,nosuid shared:5 master:1 - ext4 /dev/loop3 rw,prjquota` + "\n",
			[]Entry{{Major: 7, Minor: 3, Root: "/", MountPoint: "/var/lib/x/sessions/a b\nc\\d", FSType: "ext4", Source: "/dev/loop3", SuperOptions: "rw,prjquota"}}, ""},
		{"no super options", "1 0 0:5 / /proc rw - proc proc\n",
			[]Entry{{Major: 0, Minor: 5, Root: "/", MountPoint: "/proc", FSType: "proc", Source: "proc"}}, ""},
		{"a bind of a subdirectory", `91 27 254:0 /srv/data\040x /mnt/d rw - ext4 /dev/vda rw` + "\n",
			[]Entry{{Major: 254, Minor: 0, Root: "/srv/data x", MountPoint: "/mnt/d", FSType: "ext4", Source: "/dev/vda", SuperOptions: "rw"}}, ""},
		{"no separator", "1 0 0:5 / /proc rw proc proc rw\n", nil, "malformed"},
		{"bad device", "1 0 x:5 / /proc rw - proc proc rw\n", nil, "bad device"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d entries, want %d: %+v", len(got), len(tt.want), got)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("entry %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestParseMountinfoOfThisProcess(t *testing.T) {
	ms, err := Read("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.MountPoint == "/" {
			return
		}
	}
	t.Fatalf("no root mount among %d entries", len(ms))
}
