// Package seccomp is MCP-Forge's own seccomp profile, applied to every
// sandbox container. Podman's default profile lets an unprivileged process
// create user namespaces (uid 0 with a full capability set inside one),
// ptrace its neighbours and use the kernel keyring; this one does not.
//
// The profile is generated from the Go lists below: an allowlist (what
// Python, R, their Jupyter kernels, ZeroMQ, BLAS threads and multiprocessing
// need), explicit refusals with the errno a caller sees, and argument filters
// for clone and personality. Anything not listed fails with ENOSYS, as on a
// kernel that lacks the call, so libraries that probe for new calls fall back.
package seccomp

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"sync"
	"syscall"
)

// Namespace flags of clone(2). A clone carrying any of them is refused.
const (
	cloneNewNS     = 0x00020000
	cloneNewCgroup = 0x02000000
	cloneNewUTS    = 0x04000000
	cloneNewIPC    = 0x08000000
	cloneNewUser   = 0x10000000
	cloneNewPID    = 0x20000000
	cloneNewNet    = 0x40000000

	// NamespaceFlags is every clone flag that creates a namespace.
	NamespaceFlags = cloneNewNS | cloneNewCgroup | cloneNewUTS | cloneNewIPC | cloneNewUser | cloneNewPID | cloneNewNet
)

// allowed are the calls a sandboxed program may make without conditions.
// Derived from Podman's default allowlist: 32-bit-only names dropped (the
// profile admits only the native 64-bit ABI), everything in denied removed,
// and a few newer calls that glibc or CPython may start using added.
var allowed = []string{
	// files and directories
	"access", "chdir", "chmod", "chown", "close", "close_range", "copy_file_range", "creat",
	"dup", "dup2", "dup3", "faccessat", "faccessat2", "fadvise64", "fallocate", "fchdir",
	"fchmod", "fchmodat", "fchmodat2", "fchown", "fchownat", "fcntl", "fdatasync", "flock",
	"fstat", "fstatfs", "fsync", "ftruncate", "futimesat", "getcwd", "getdents", "getdents64",
	"lchown", "link", "linkat", "lseek", "lstat", "mkdir", "mkdirat", "mknod", "mknodat",
	"newfstatat", "open", "openat", "openat2", "pread64", "preadv", "preadv2", "pwrite64",
	"pwritev", "pwritev2", "read", "readahead", "readlink", "readlinkat", "readv", "rename",
	"renameat", "renameat2", "rmdir", "sendfile", "splice", "stat", "statfs", "statx",
	"symlink", "symlinkat", "sync", "sync_file_range", "syncfs", "tee", "truncate", "umask",
	"unlink", "unlinkat", "utime", "utimensat", "utimes", "write", "writev", "cachestat",
	// extended attributes
	"fgetxattr", "flistxattr", "fremovexattr", "fsetxattr", "getxattr", "lgetxattr",
	"listxattr", "llistxattr", "lremovexattr", "lsetxattr", "removexattr", "setxattr",
	// memory
	"brk", "get_mempolicy", "madvise", "map_shadow_stack", "mbind", "membarrier",
	"memfd_create", "memfd_secret", "mincore", "mlock", "mlock2", "mlockall", "mmap",
	"mprotect", "mremap", "mseal", "msync", "munlock", "munlockall", "munmap",
	"pkey_alloc", "pkey_free", "pkey_mprotect", "set_mempolicy",
	// processes and threads (clone is filtered below)
	"execve", "execveat", "exit", "exit_group", "fork", "vfork", "wait4", "waitid",
	"get_robust_list", "set_robust_list", "set_tid_address", "rseq", "arch_prctl", "prctl",
	"getpid", "getppid", "gettid", "getpgid", "getpgrp", "getsid", "setpgid", "setsid",
	"getpriority", "setpriority", "ioprio_get", "ioprio_set", "getrlimit", "setrlimit",
	"prlimit64", "getrusage", "times", "capget", "capset", "seccomp",
	"landlock_add_rule", "landlock_create_ruleset", "landlock_restrict_self",
	"pidfd_open", "pidfd_send_signal", "process_mrelease",
	"sched_get_priority_max", "sched_get_priority_min", "sched_getaffinity", "sched_getattr",
	"sched_getparam", "sched_getscheduler", "sched_rr_get_interval", "sched_setaffinity",
	"sched_setattr", "sched_setparam", "sched_setscheduler", "sched_yield",
	// credentials (without capabilities these only shuffle the ids a process has)
	"getegid", "geteuid", "getgid", "getgroups", "getresgid", "getresuid", "getuid",
	"setfsgid", "setfsuid", "setgid", "setgroups", "setregid", "setresgid", "setresuid",
	"setreuid", "setuid",
	// signals
	"kill", "tgkill", "tkill", "pause", "restart_syscall", "rt_sigaction", "rt_sigpending",
	"rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait",
	"rt_tgsigqueueinfo", "sigaltstack", "signalfd", "signalfd4",
	// time and timers (reading clocks only)
	"alarm", "clock_getres", "clock_gettime", "clock_nanosleep", "getitimer", "gettimeofday",
	"nanosleep", "setitimer", "time", "timer_create", "timer_delete", "timer_getoverrun",
	"timer_gettime", "timer_settime", "timerfd_create", "timerfd_gettime", "timerfd_settime",
	// waiting and events (ZeroMQ, asyncio)
	"epoll_create", "epoll_create1", "epoll_ctl", "epoll_pwait", "epoll_pwait2", "epoll_wait",
	"eventfd", "eventfd2", "futex", "futex_requeue", "futex_wait", "futex_waitv", "futex_wake",
	"inotify_add_watch", "inotify_init", "inotify_init1", "inotify_rm_watch",
	"pipe", "pipe2", "poll", "ppoll", "pselect6", "select",
	// sockets (unix sockets for the kernels; the network namespace is empty)
	"accept", "accept4", "bind", "connect", "getpeername", "getsockname", "getsockopt",
	"listen", "recvfrom", "recvmmsg", "recvmsg", "sendmmsg", "sendmsg", "sendto",
	"setsockopt", "shutdown", "socket", "socketpair",
	// System V and POSIX IPC (the container has its own IPC namespace)
	"msgctl", "msgget", "msgrcv", "msgsnd", "semctl", "semget", "semop", "semtimedop",
	"shmat", "shmctl", "shmdt", "shmget", "mq_getsetattr", "mq_notify", "mq_open",
	"mq_timedreceive", "mq_timedsend", "mq_unlink",
	// asynchronous I/O (the old interface; io_uring is refused)
	"io_cancel", "io_destroy", "io_getevents", "io_setup", "io_submit",
	// misc
	"getcpu", "getrandom", "ioctl", "sysinfo", "uname",
}

// archOnly limits a few allowed calls to the architecture that has them.
var archOnly = map[string][]string{"arch_prctl": {"amd64"}}

// Denial is a group of calls the profile refuses, with the errno the caller
// gets and why a code sandbox must not have them.
type Denial struct {
	Names []string
	Errno syscall.Errno
	Why   string
}

// denied is explicit so that a refusal is an immediate, documented EPERM
// rather than the ENOSYS of an unknown call, and so that tests can name each
// one. Calls that do not exist on an architecture are ignored there.
var denied = []Denial{
	{[]string{"unshare", "setns"}, syscall.EPERM,
		"namespaces: unshare(CLONE_NEWUSER) gives uid 0 with every capability inside a new user namespace, the door to most kernel exploits"},
	{[]string{"clone3"}, syscall.ENOSYS,
		"its flags sit in memory that seccomp cannot read; ENOSYS makes glibc fall back to clone, whose flags are filtered"},
	{[]string{"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "process_madvise", "pidfd_getfd"}, syscall.EPERM,
		"reading, steering or stopping other processes (PTRACE_SEIZE on pid 1 keeps the container from exiting)"},
	{[]string{"keyctl", "add_key", "request_key"}, syscall.EPERM,
		"the kernel keyring is not namespaced"},
	{[]string{"bpf", "perf_event_open", "userfaultfd", "lookup_dcookie", "fanotify_init", "fanotify_mark", "modify_ldt", "vmsplice"}, syscall.EPERM,
		"kernel attack surface with a history of exploits and no use in a code sandbox"},
	{[]string{"io_uring_setup", "io_uring_enter", "io_uring_register"}, syscall.ENOSYS,
		"io_uring: a large, often-exploited kernel interface that bypasses syscall filtering for the operations it queues; ENOSYS so libraries fall back to epoll and threads as on kernels without it"},
	{[]string{"mount", "umount2", "mount_setattr", "fsopen", "fsmount", "fsconfig", "fspick", "move_mount", "open_tree", "open_tree_attr",
		"pivot_root", "chroot", "statmount", "listmount", "quotactl", "quotactl_fd", "name_to_handle_at", "open_by_handle_at"}, syscall.EPERM,
		"file systems and mounts: the sandbox's view of files is fixed by the core"},
	{[]string{"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon", "swapoff", "acct",
		"settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname", "syslog", "vhangup",
		"iopl", "ioperm", "nfsservctl", "uselib", "ustat", "sysfs", "_sysctl", "migrate_pages", "move_pages", "remap_file_pages"}, syscall.EPERM,
		"host administration: kernels, modules, clocks, swap, kernel log, hardware ports, obsolete calls"},
}

// personalities are the personality(2) values that are allowed: the default,
// the 32-bit and UNAME26 variants glibc and setarch use, and the query value.
var personalities = []uint64{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// Document types: the OCI/containers seccomp JSON that Podman reads.
type (
	profile struct {
		DefaultAction   string `json:"defaultAction"`
		DefaultErrnoRet uint   `json:"defaultErrnoRet"`
		DefaultErrno    string `json:"defaultErrno"`
		ArchMap         []arch `json:"archMap"`
		Syscalls        []rule `json:"syscalls"`
	}
	arch struct {
		Architecture     string   `json:"architecture"`
		SubArchitectures []string `json:"subArchitectures"`
	}
	rule struct {
		Names    []string `json:"names"`
		Action   string   `json:"action"`
		ErrnoRet *uint    `json:"errnoRet,omitempty"`
		Errno    string   `json:"errno,omitempty"`
		Args     []arg    `json:"args,omitempty"`
		Comment  string   `json:"comment,omitempty"`
		Includes filter   `json:"includes"`
	}
	arg struct {
		Index    uint   `json:"index"`
		Value    uint64 `json:"value"`
		ValueTwo uint64 `json:"valueTwo"`
		Op       string `json:"op"`
	}
	filter struct {
		Arches []string `json:"arches,omitempty"`
	}
)

const (
	actAllow = "SCMP_ACT_ALLOW"
	actErrno = "SCMP_ACT_ERRNO"
)

var errnoNames = map[syscall.Errno]string{syscall.EPERM: "EPERM", syscall.ENOSYS: "ENOSYS"}

func errnoRule(names []string, e syscall.Errno, comment string, args ...arg) rule {
	n := uint(e)
	return rule{Names: names, Action: actErrno, ErrnoRet: &n, Errno: errnoNames[e], Args: args, Comment: comment}
}

// build is the profile; gvisor is its variant for sandboxes under gVisor,
// which allows clone3: runsc applies an OCI profile in its Sentry but
// answers every SCMP_ACT_ERRNO with EPERM (it ignores errnoRet), so the
// ENOSYS that makes glibc fall back to clone would be an EPERM, and no
// thread could start. Allowed there, clone3's namespace flags make
// namespaces of the Sentry, not of the host kernel.
func build(gvisor bool) profile {
	p := profile{
		DefaultAction: actErrno, DefaultErrnoRet: uint(syscall.ENOSYS), DefaultErrno: "ENOSYS",
		// Native 64-bit ABIs only: no 32-bit x86, x32 or arm compat entry
		// points, which have their own syscall numbers and histories.
		ArchMap: []arch{{"SCMP_ARCH_X86_64", []string{}}, {"SCMP_ARCH_AARCH64", []string{}}},
	}
	var plain []string
	for _, n := range allowed {
		if archOnly[n] == nil {
			plain = append(plain, n)
		}
	}
	if gvisor {
		plain = append(plain, "clone3")
	}
	slices.Sort(plain)
	p.Syscalls = append(p.Syscalls, rule{Names: plain, Action: actAllow, Comment: "MCP-Forge allowlist"})
	for _, n := range sortedKeys(archOnly) {
		p.Syscalls = append(p.Syscalls, rule{Names: []string{n}, Action: actAllow, Includes: filter{Arches: archOnly[n]}})
	}
	// clone is allowed only without namespace flags; each flag has its own
	// EPERM rule so that the refusal is EPERM, not the default ENOSYS.
	p.Syscalls = append(p.Syscalls, rule{Names: []string{"clone"}, Action: actAllow,
		Args: []arg{{Index: 0, Value: NamespaceFlags, ValueTwo: 0, Op: "SCMP_CMP_MASKED_EQ"}}, Comment: "clone without namespace flags"})
	for _, f := range []uint64{cloneNewNS, cloneNewCgroup, cloneNewUTS, cloneNewIPC, cloneNewUser, cloneNewPID, cloneNewNet} {
		p.Syscalls = append(p.Syscalls, errnoRule([]string{"clone"}, syscall.EPERM, "clone with a namespace flag",
			arg{Index: 0, Value: f, ValueTwo: f, Op: "SCMP_CMP_MASKED_EQ"}))
	}
	for _, v := range personalities {
		p.Syscalls = append(p.Syscalls, rule{Names: []string{"personality"}, Action: actAllow,
			Args: []arg{{Index: 0, Value: v, Op: "SCMP_CMP_EQ"}}})
	}
	for _, d := range denied {
		if gvisor && slices.Equal(d.Names, []string{"clone3"}) {
			continue
		}
		names := slices.Clone(d.Names)
		slices.Sort(names)
		p.Syscalls = append(p.Syscalls, errnoRule(names, d.Errno, d.Why))
	}
	return p
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

var documents = [2]func() []byte{
	sync.OnceValue(func() []byte { return marshal(build(false)) }),
	sync.OnceValue(func() []byte { return marshal(build(true)) }),
}

func marshal(p profile) []byte {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		panic(err) // only static data: cannot fail
	}
	return append(b, '\n')
}

// JSON is the profile as Podman reads it; the same bytes on every call.
func JSON() []byte { return documents[0]() }

// GVisorJSON is the profile of sandboxes under gVisor (build says how it
// differs).
func GVisorJSON() []byte { return documents[1]() }

// Digest is the sha256 of JSON, hex-encoded.
func Digest() string { return digest(JSON()) }

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Allowed lists the calls allowed without conditions, sorted.
func Allowed() []string {
	out := slices.Clone(allowed)
	slices.Sort(out)
	return out
}

// Denied lists the explicitly refused calls with their errno and reason.
func Denied() []Denial { return slices.Clone(denied) }

// Summary counts the profile's rules, for doctor.
type Summary struct {
	Allowed     int // allowed without conditions
	Filtered    int // allowed only for some argument values (clone, personality)
	DeniedEPERM int
	DeniedNoSys int // refused with ENOSYS (the default for unlisted calls too)
}

// Summarize counts the profile's rules.
func Summarize() Summary {
	s := Summary{Allowed: len(allowed), Filtered: 2}
	for _, d := range denied {
		if d.Errno == syscall.EPERM {
			s.DeniedEPERM += len(d.Names)
		} else {
			s.DeniedNoSys += len(d.Names)
		}
	}
	return s
}
