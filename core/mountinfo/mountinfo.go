// Package mountinfo reads /proc/<pid>/mountinfo (proc(5)): which
// filesystems are mounted where, and which part of each a mount shows.
package mountinfo

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Entry is one line of /proc/<pid>/mountinfo.
type Entry struct {
	Major, Minor uint32
	Root         string // the path within its filesystem the mount shows
	MountPoint   string
	FSType       string
	Source       string
	SuperOptions string
}

// Read reads a mountinfo file (/proc/self/mountinfo).
func Read(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f)
}

// Parse reads the format of proc(5): "id parent major:minor root
// mountpoint options [optional fields...] - fstype source superoptions",
// where space, tab, newline and backslash in paths are octal escapes.
func Parse(r io.Reader) ([]Entry, error) {
	var out []Entry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if len(f) < 7 || sep < 0 || sep+2 >= len(f) {
			return nil, fmt.Errorf("mountinfo line %d: malformed: %q", n, sc.Text())
		}
		maj, min, ok := strings.Cut(f[2], ":")
		ma, err1 := strconv.ParseUint(maj, 10, 32)
		mi, err2 := strconv.ParseUint(min, 10, 32)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("mountinfo line %d: bad device %q", n, f[2])
		}
		e := Entry{Major: uint32(ma), Minor: uint32(mi), Root: unescapeOctal(f[3]), MountPoint: unescapeOctal(f[4]),
			FSType: f[sep+1], Source: unescapeOctal(f[sep+2])}
		if sep+3 < len(f) {
			e.SuperOptions = f[sep+3]
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// unescapeOctal undoes the kernel's \ooo escapes of mountinfo paths.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
