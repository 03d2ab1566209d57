package seccomp

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// doc is the profile read back as Podman reads it (the JSON, not our types).
type doc struct {
	DefaultAction   string `json:"defaultAction"`
	DefaultErrnoRet uint   `json:"defaultErrnoRet"`
	ArchMap         []struct {
		Architecture     string   `json:"architecture"`
		SubArchitectures []string `json:"subArchitectures"`
	} `json:"archMap"`
	Syscalls []struct {
		Names    []string `json:"names"`
		Action   string   `json:"action"`
		ErrnoRet *uint    `json:"errnoRet"`
		Args     []struct {
			Index    uint   `json:"index"`
			Value    uint64 `json:"value"`
			ValueTwo uint64 `json:"valueTwo"`
			Op       string `json:"op"`
		} `json:"args"`
	} `json:"syscalls"`
}

func load(t *testing.T) doc {
	t.Helper()
	var d doc
	dec := json.NewDecoder(strings.NewReader(string(JSON())))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("profile is not valid JSON: %v", err)
	}
	return d
}

// forbidden is what issue 10 requires the profile to refuse, with the errno.
var forbidden = map[string]syscall.Errno{
	"unshare": syscall.EPERM, "setns": syscall.EPERM, "clone3": syscall.ENOSYS,
	"ptrace": syscall.EPERM, "process_vm_readv": syscall.EPERM, "process_vm_writev": syscall.EPERM,
	"keyctl": syscall.EPERM, "add_key": syscall.EPERM, "request_key": syscall.EPERM,
	"bpf": syscall.EPERM, "perf_event_open": syscall.EPERM, "userfaultfd": syscall.EPERM,
	"mount": syscall.EPERM, "umount2": syscall.EPERM, "fsopen": syscall.EPERM, "fsmount": syscall.EPERM,
	"fsconfig": syscall.EPERM, "move_mount": syscall.EPERM, "open_tree": syscall.EPERM,
	"pivot_root": syscall.EPERM, "chroot": syscall.EPERM, "kexec_load": syscall.EPERM,
	"kexec_file_load": syscall.EPERM, "init_module": syscall.EPERM, "finit_module": syscall.EPERM,
	"delete_module": syscall.EPERM, "acct": syscall.EPERM, "swapon": syscall.EPERM, "swapoff": syscall.EPERM,
	"reboot": syscall.EPERM, "settimeofday": syscall.EPERM, "clock_settime": syscall.EPERM,
	"adjtimex": syscall.EPERM, "iopl": syscall.EPERM, "ioperm": syscall.EPERM,
	"lookup_dcookie": syscall.EPERM, "name_to_handle_at": syscall.EPERM, "open_by_handle_at": syscall.EPERM,
	"quotactl": syscall.EPERM, "syslog": syscall.EPERM, "vhangup": syscall.EPERM,
	"io_uring_setup": syscall.ENOSYS, "io_uring_enter": syscall.ENOSYS, "io_uring_register": syscall.ENOSYS,
	"kcmp": syscall.EPERM, "pidfd_getfd": syscall.EPERM, "fanotify_init": syscall.EPERM,
	"sethostname": syscall.EPERM, "setdomainname": syscall.EPERM,
}

// Every forbidden call is refused with its errno and allowed by no rule
// (clone is tested separately: it is allowed only without namespace flags).
func TestForbiddenCallsRefused(t *testing.T) {
	d := load(t)
	for name, want := range forbidden {
		errnoed := false
		for _, r := range d.Syscalls {
			if !slices.Contains(r.Names, name) {
				continue
			}
			switch r.Action {
			case "SCMP_ACT_ALLOW":
				t.Errorf("%s is allowed by a rule (args %v)", name, r.Args)
			case "SCMP_ACT_ERRNO":
				if len(r.Args) != 0 {
					t.Errorf("%s is refused only for some arguments", name)
				}
				if r.ErrnoRet == nil || syscall.Errno(*r.ErrnoRet) != want {
					t.Errorf("%s refused with errno %v, want %d (%v)", name, r.ErrnoRet, want, want)
				}
				errnoed = true
			default:
				t.Errorf("%s has action %s", name, r.Action)
			}
		}
		if !errnoed {
			t.Errorf("%s has no explicit refusal", name)
		}
	}
}

func TestDefaultsAndArchitectures(t *testing.T) {
	d := load(t)
	if d.DefaultAction != "SCMP_ACT_ERRNO" || syscall.Errno(d.DefaultErrnoRet) != syscall.ENOSYS {
		t.Errorf("default %s/%d, want SCMP_ACT_ERRNO/ENOSYS", d.DefaultAction, d.DefaultErrnoRet)
	}
	if len(d.ArchMap) == 0 {
		t.Fatal("no architectures")
	}
	for _, a := range d.ArchMap {
		if len(a.SubArchitectures) != 0 {
			t.Errorf("%s admits compat ABIs %v", a.Architecture, a.SubArchitectures)
		}
	}
}

// clone is allowed only when no namespace flag is set, and refused with
// EPERM for each flag; CLONE_NEWUSER in particular.
func TestCloneNamespaceFilter(t *testing.T) {
	d := load(t)
	const newUser = 0x10000000
	var allow, perFlag uint64
	for _, r := range d.Syscalls {
		if !slices.Contains(r.Names, "clone") {
			continue
		}
		if len(r.Names) != 1 || len(r.Args) != 1 || r.Args[0].Index != 0 || r.Args[0].Op != "SCMP_CMP_MASKED_EQ" {
			t.Fatalf("clone rule without a flags filter: %+v", r)
		}
		a := r.Args[0]
		switch r.Action {
		case "SCMP_ACT_ALLOW":
			if a.ValueTwo != 0 {
				t.Errorf("clone allowed when flags&%#x == %#x", a.Value, a.ValueTwo)
			}
			allow |= a.Value
		case "SCMP_ACT_ERRNO":
			if a.Value != a.ValueTwo || r.ErrnoRet == nil || syscall.Errno(*r.ErrnoRet) != syscall.EPERM {
				t.Errorf("clone refusal %+v", r)
			}
			perFlag |= a.Value
		}
	}
	if allow != NamespaceFlags || perFlag != NamespaceFlags {
		t.Fatalf("allow mask %#x, refused flags %#x; want both %#x", allow, perFlag, uint64(NamespaceFlags))
	}
	if allow&newUser == 0 {
		t.Fatal("CLONE_NEWUSER is not filtered")
	}
}

// personality is allowed only for the values glibc and setarch use.
func TestPersonalityFilter(t *testing.T) {
	d := load(t)
	var vals []uint64
	for _, r := range d.Syscalls {
		if slices.Contains(r.Names, "personality") {
			if r.Action != "SCMP_ACT_ALLOW" || len(r.Args) != 1 || r.Args[0].Op != "SCMP_CMP_EQ" {
				t.Fatalf("personality rule %+v", r)
			}
			vals = append(vals, r.Args[0].Value)
		}
	}
	slices.Sort(vals)
	if !slices.Equal(vals, []uint64{0, 8, 0x20000, 0x20008, 0xffffffff}) {
		t.Fatalf("personality values %#x", vals)
	}
}

// What ordinary Python, R, ipykernel/IRkernel (ZeroMQ over ipc, threads)
// and multiprocessing need stays allowed.
func TestWorkloadCallsAllowed(t *testing.T) {
	d := load(t)
	allowed := map[string]bool{}
	for _, r := range d.Syscalls {
		if r.Action == "SCMP_ACT_ALLOW" && len(r.Args) == 0 {
			for _, n := range r.Names {
				allowed[n] = true
			}
		}
	}
	for _, n := range []string{"read", "write", "openat", "close", "mmap", "mprotect", "munmap", "brk", "execve",
		"futex", "set_robust_list", "rseq", "sched_getaffinity", "epoll_create1", "epoll_ctl", "epoll_wait",
		"eventfd2", "socket", "socketpair", "bind", "listen", "accept4", "connect", "sendto", "recvfrom",
		"getrandom", "wait4", "pipe2", "dup3", "fcntl", "ioctl", "prlimit64", "statx", "newfstatat",
		"rt_sigaction", "rt_sigprocmask", "kill", "madvise", "getdents64", "memfd_create", "sysinfo", "uname",
		"vfork", "fork", "exit_group", "set_tid_address", "clock_nanosleep", "poll", "ppoll", "pselect6"} {
		if !allowed[n] {
			t.Errorf("%s is not allowed", n)
		}
	}
	seen := map[string]bool{}
	for _, n := range Allowed() {
		if seen[n] {
			t.Errorf("%s listed twice", n)
		}
		seen[n] = true
		if _, bad := forbidden[n]; bad {
			t.Errorf("%s is both allowed and forbidden", n)
		}
	}
	for _, dn := range Denied() {
		for _, n := range dn.Names {
			if seen[n] {
				t.Errorf("%s is both in the allowlist and denied", n)
			}
		}
	}
}

func TestInstallAndVerify(t *testing.T) {
	base := t.TempDir()
	p, err := Install(base)
	if err != nil {
		t.Fatal(err)
	}
	if p != Path(base) || filepath.Dir(p) != base {
		t.Fatalf("installed at %s, want %s", p, Path(base))
	}
	if err := Verify(p); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", st.Mode())
	}
	os.WriteFile(p, []byte("{}"), 0o644)
	if err := Verify(p); err == nil || !strings.Contains(err.Error(), "modified") {
		t.Fatalf("edited profile verified: %v", err)
	}
	if _, err := Install(base); err != nil || Verify(p) != nil {
		t.Fatalf("reinstall did not restore the profile: %v", err)
	}
	os.Remove(p)
	if err := Verify(p); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing profile verified: %v", err)
	}
	if s := Summarize(); s.Allowed != len(Allowed()) || s.DeniedEPERM == 0 || s.DeniedNoSys != 4 {
		t.Errorf("summary %+v", s)
	}
}
