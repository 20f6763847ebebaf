"""The seccomp layer: the filters that refuse system calls, built with libseccomp through ctypes.

The worker installs :func:`worker_filter` on itself (no internet, netlink or packet sockets, no
ptrace, ``process_vm_*``, unshare, no namespace but those a run's test process is born in, bpf,
io_uring, keyctl, perf_event_open). Each forked child then installs the children's allow-list,
:data:`CHILD_SYSCALLS` with a few calls allowed for some arguments only, everything else
refused with EPERM; where the allow-list cannot be installed, the deny-list
(:func:`child_deny_filter`). The allow-list is compiled once per worker (:class:`ChildProgram`).
:mod:`grader.sandbox.harden` applies them. Standard library only: the worker imports this
module inside its sandbox.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from grader.sandbox.base import SandboxError

__all__ = [
    "CHILD_SYSCALLS",
    "ChildProgram",
    "child_allow_filter",
    "child_allow_program",
    "child_deny_filter",
    "child_syscalls_here",
    "load_libseccomp",
    "probe_seccomp",
    "worker_filter",
]

_ACT_ALLOW = 0x7FFF0000
_CMP_NE, _CMP_EQ, _CMP_MASKED_EQ = 1, 4, 7
_ATTR_TSYNC = 4  # SCMP_FLTATR_CTL_TSYNC: the filter covers every thread of the process
_CLONE_THREAD = 0x00010000
_CLONE_NAMESPACES = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
_LOW32 = 0xFFFFFFFF
# The namespaces a run's test process is born in (grader.worker.zygote): the worker may make
# them (and mount in them, which needs them), never its children.
_RUN_NAMESPACES = 0x10000000 | 0x20000000 | 0x00020000

# No grading run needs these; each is a way out of the sandbox, into another process or into
# a large attack surface of the kernel.
_DENIED_IN_WORKER = (
    "ptrace", "process_vm_readv", "process_vm_writev", "umount2", "pivot_root",
    "chroot", "unshare", "setns", "bpf", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "keyctl", "add_key", "request_key", "perf_event_open", "userfaultfd", "open_tree",
    "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "kexec_load",
    "kexec_file_load", "init_module", "finit_module", "delete_module", "open_by_handle_at",
    "name_to_handle_at", "swapon", "swapoff", "reboot", "acct", "quotactl", "quotactl_fd",
    "lookup_dcookie", "fanotify_init", "kcmp", "pidfd_getfd", "syslog", "vhangup", "iopl",
    "ioperm", "move_pages", "migrate_pages", "uselib",
)
# The children's allow-list: the system calls a numpy + pytest test run makes (measured with
# `strace -f` on graded runs of the course tests and of the bundled student's suite), and their
# harmless kin, so that no test using tmp_path, tempfile, warnings, clocks, random numbers,
# signals to itself or threads meets a refusal. Everything else fails with EPERM: no new
# process or program, no socket, no new session, no device node, no namespace, no mount.
# Names this architecture lacks (the 32-bit spellings, or calls newer than libseccomp) are
# skipped. A few more calls are allowed with some arguments only (_ALLOWED_WITH).
CHILD_SYSCALLS: frozenset[str] = frozenset((
    # Ending: the process's and a thread's exit, returning from a signal handler, resuming a
    # call a signal interrupted.
    "exit", "exit_group", "rt_sigreturn", "restart_syscall",
    # Memory: the allocator, numpy's buffers, thread stacks, OpenBLAS's NUMA-aware buffers.
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "mincore", "msync", "membarrier",
    "mbind", "get_mempolicy", "set_mempolicy",
    # Reading and writing what is open: the test files, fixtures, the report pipe, tmp_path.
    "read", "readv", "pread64", "preadv", "preadv2", "write", "writev", "pwrite64", "pwritev",
    "pwritev2", "lseek", "_llseek", "sendfile", "copy_file_range", "fsync", "fdatasync",
    "ftruncate", "fallocate", "fadvise64", "readahead", "flock",
    # Opening, closing and duplicating descriptors; pipes inside the process; waiting on them.
    "open", "openat", "openat2", "creat", "close", "close_range", "dup", "dup2", "dup3", "pipe",
    "pipe2", "select", "pselect6", "poll", "ppoll", "epoll_create", "epoll_create1", "epoll_ctl",
    "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2",
    # Looking at the file system: stat, folder listings, links, the working directory.
    "stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs", "access", "faccessat",
    "faccessat2", "readlink", "readlinkat", "getdents", "getdents64", "getcwd", "chdir", "fchdir",
    # Changing files where the process may write (its own temporary folder): what tmp_path,
    # tempfile and shutil's copies do.
    "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "rename", "renameat", "renameat2", "link",
    "linkat", "symlink", "symlinkat", "chmod", "fchmod", "fchmodat", "fchmodat2", "umask",
    "truncate", "utime", "utimes", "utimensat", "futimesat", "getxattr", "lgetxattr", "fgetxattr",
    "listxattr", "llistxattr", "flistxattr", "setxattr", "lsetxattr", "fsetxattr", "removexattr",
    "lremovexattr", "fremovexattr",
    # Clocks, sleeping and timers: time, the per-test time limit (setitimer and SIGALRM).
    "clock_gettime", "clock_getres", "clock_nanosleep", "gettimeofday", "time", "nanosleep",
    "times", "getitimer", "setitimer", "alarm", "timer_create", "timer_settime", "timer_gettime",
    "timer_getoverrun", "timer_delete", "timerfd_create", "timerfd_settime", "timerfd_gettime",
    # Randomness: os.urandom, random's seeding, numpy's default_rng.
    "getrandom",
    # What the process may ask about itself and the machine, and its own limits.
    "getpid", "getppid", "gettid", "getuid", "geteuid", "getgid", "getegid", "getresuid",
    "getresgid", "getgroups", "getpgid", "getpgrp", "getsid", "getrlimit", "setrlimit",
    "getrusage", "sysinfo", "uname", "getpriority", "getcpu", "capget", "sched_getaffinity",
    "sched_getparam", "sched_getscheduler", "sched_getattr", "sched_get_priority_max",
    "sched_get_priority_min", "sched_rr_get_interval", "sched_yield",
    # Signals inside the process: handlers, masks, alternate stacks, waiting for one.
    "rt_sigaction", "rt_sigprocmask", "rt_sigpending", "rt_sigsuspend", "rt_sigtimedwait",
    "sigaltstack", "pause", "signalfd", "signalfd4",
    # Threads (clone itself only for a thread, below): locks, thread-local state, stacks.
    "futex", "futex_waitv", "set_robust_list", "set_tid_address", "rseq", "arch_prctl",
    "map_shadow_stack",
))
# Commands of fcntl, ioctl and prctl a child may use: descriptor flags, locks, pipe sizes and
# seals; the terminal and non-blocking queries Python makes on every file it opens; thread and
# memory-area names and read-only questions. Not among them: F_SETOWN, F_SETSIG, F_SETOWN_EX,
# F_SETLEASE, F_NOTIFY, FIOSETOWN, SIOCSPGRP, FIOASYNC (each makes the kernel signal a chosen
# process), TIOCSTI (types into a terminal), or any prctl that changes the process.
_FCNTL_COMMANDS = (0, 1, 2, 3, 4, 5, 6, 7, 9, 11, 16, 36, 37, 38, 1025, 1030, 1031, 1032, 1033, 1034)
_IOCTL_REQUESTS = (0x5401, 0x5413, 0x540F, 0x541B, 0x5421, 0x5450, 0x5451)  # TCGETS, TIOCGWINSZ, ...
_PRCTL_OPTIONS = (2, 3, 15, 16, 21, 23, 30, 39, 0x53564D41)  # PR_GET_PDEATHSIG, ..., PR_SET_VMA
# In a child, running the tests: no new process, no new program, no new session or group.
_DENIED_IN_CHILD = (
    "fork", "vfork", "execve", "execveat", "setsid", "setpgid", "pidfd_open", "pidfd_send_signal",
    "mount",  # the worker may mount in a run's own namespaces; a child never
)
# Calls that reach another process by pid (argument index of the pid): only the child itself.
_OWN_PID_ONLY = (("kill", 0), ("tkill", 0), ("tgkill", 0), ("rt_sigqueueinfo", 0), ("rt_tgsigqueueinfo", 0))
# Calls where pid 0 means "myself": any other pid (the worker, a sibling) is refused.
_SELF_ZERO_ONLY = (
    ("prlimit64", 0), ("setpriority", 1), ("sched_setaffinity", 0), ("sched_setscheduler", 0),
    ("sched_setparam", 0), ("sched_setattr", 0), ("ioprio_set", 1),
)
_F_SETOWN, _F_SETSIG, _F_SETOWN_EX = 8, 10, 15  # make the kernel signal a chosen process
_FIOSETOWN, _SIOCSPGRP, _TIOCSTI = 0x8901, 0x8902, 0x5412
_AF_UNIX = 1


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint), ("minor", ctypes.c_uint), ("micro", ctypes.c_uint)]


def _errno_action(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


@functools.cache
def load_libseccomp() -> ctypes.CDLL:
    """libseccomp through ctypes (the Debian package libseccomp2): no compiler, no PyPI
    package, and the same library inside bubblewrap (it is under /usr)."""
    lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(_ArgCmp),
    ]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_api_get.restype = ctypes.c_uint
    lib.seccomp_version.restype = ctypes.POINTER(_Version)
    return lib


class _Filter:
    """A seccomp filter built with libseccomp: by default one that allows everything but the
    calls denied; with ``default`` an errno action, an allow-list of the calls allowed."""

    def __init__(self, lib: ctypes.CDLL, default: int = _ACT_ALLOW) -> None:
        self.lib = lib
        self.ctx = lib.seccomp_init(default)
        if not self.ctx:
            raise SandboxError("seccomp_init failed: expected a seccomp context, got none")

    def deny(self, name: str, *conditions: tuple[int, int, int, int], code: int = errno.EPERM) -> None:
        self._rule(_errno_action(code), name, conditions)

    def allow(self, name: str, *conditions: tuple[int, int, int, int]) -> None:
        self._rule(_ACT_ALLOW, name, conditions)

    def _rule(self, action: int, name: str, conditions: tuple[tuple[int, int, int, int], ...]) -> None:
        number = _syscall_number(self.lib, name)
        if number < 0:  # not a system call of this architecture, or newer than libseccomp
            return
        array = (_ArgCmp * len(conditions))(*(_ArgCmp(*c) for c in conditions)) if conditions else None
        rc = self.lib.seccomp_rule_add_array(self.ctx, action, number, len(conditions), array)
        if rc < 0:
            self.lib.seccomp_release(self.ctx)
            raise SandboxError(f"seccomp rule for {name} {conditions}: expected 0, libseccomp returned {rc}")

    def load(self, *, all_threads: bool = False) -> None:
        try:
            if all_threads:
                self.lib.seccomp_attr_set(self.ctx, _ATTR_TSYNC, 1)
            rc = self.lib.seccomp_load(self.ctx)
            if rc < 0:
                raise SandboxError(f"seccomp_load: expected 0, got {rc} ({os.strerror(-rc)})")
        finally:
            self.lib.seccomp_release(self.ctx)


def worker_filter(lib: ctypes.CDLL) -> _Filter:
    """The worker's own filter: everything allowed but the calls no grading run needs (ptrace,
    ``process_vm_*``, bpf, io_uring, ...), sockets other than AF_UNIX, namespaces other than a
    run's, ``clone3`` and the ``TIOCSTI`` ioctl."""
    rules = _Filter(lib)
    for name in _DENIED_IN_WORKER:
        rules.deny(name)
    rules.deny("socket", (0, _CMP_NE, _AF_UNIX, 0))  # AF_UNIX only: no internet, netlink, packet
    for flag in _CLONE_NAMESPACES:
        if not flag & _RUN_NAMESPACES:
            rules.deny("clone", (0, _CMP_MASKED_EQ, flag, flag))
    rules.deny("clone3", code=errno.ENOSYS)  # its flags sit in memory a filter cannot read; libc falls back to clone
    rules.deny("ioctl", (1, _CMP_MASKED_EQ, _LOW32, _TIOCSTI))
    return rules


def _syscall_number(lib: ctypes.CDLL, name: str) -> int:
    """The call's number on this architecture; negative if it has none here."""
    return lib.seccomp_syscall_resolve_name(name.encode())


def child_syscalls_here() -> frozenset[str]:
    """The names of :data:`CHILD_SYSCALLS` this architecture has: the allow-list as installed."""
    lib = load_libseccomp()
    return frozenset(name for name in CHILD_SYSCALLS if _syscall_number(lib, name) >= 0)


def child_allow_filter(lib: ctypes.CDLL, pid: int) -> _Filter:
    """The children's allow-list, with the argument rules of the deny-list turned around: a
    thread but no process, signals to itself only, the harmless commands of fcntl, ioctl and
    prctl only. The worker's filter still applies beneath it (filters stack)."""
    rules = _Filter(lib, default=_errno_action(errno.EPERM))
    for name in sorted(CHILD_SYSCALLS):
        rules.allow(name)
    # clone for a thread, never with a new namespace (the worker refuses those too).
    rules.allow("clone", (0, _CMP_MASKED_EQ, _CLONE_THREAD | sum(_CLONE_NAMESPACES), _CLONE_THREAD))
    rules.deny("clone3", code=errno.ENOSYS)  # as in the worker: libc then falls back to clone
    for name, arg in _OWN_PID_ONLY:
        rules.allow(name, (arg, _CMP_EQ, pid, 0))
    for name, arg in _SELF_ZERO_ONLY:
        rules.allow(name, (arg, _CMP_EQ, 0, 0))
    for name, values in (("fcntl", _FCNTL_COMMANDS), ("ioctl", _IOCTL_REQUESTS)):
        for value in values:
            rules.allow(name, (1, _CMP_MASKED_EQ, _LOW32, value))
    for option in _PRCTL_OPTIONS:
        rules.allow("prctl", (0, _CMP_MASKED_EQ, _LOW32, option))
    return rules


def child_deny_filter(lib: ctypes.CDLL, pid: int) -> _Filter:
    """The children's deny-list: the fallback where the allow-list cannot be installed."""
    rules = _Filter(lib)
    for name in _DENIED_IN_CHILD:
        rules.deny(name)
    rules.deny("clone", (0, _CMP_MASKED_EQ, _CLONE_THREAD, 0))  # threads yes, processes no
    for flag in _CLONE_NAMESPACES:
        rules.deny("clone", (0, _CMP_MASKED_EQ, flag, flag))  # and no namespaces
    for name, arg in _OWN_PID_ONLY:
        rules.deny(name, (arg, _CMP_NE, pid, 0))
    for name, arg in _SELF_ZERO_ONLY:
        rules.deny(name, (arg, _CMP_NE, 0, 0))
    for command in (_F_SETOWN, _F_SETSIG, _F_SETOWN_EX):
        rules.deny("fcntl", (1, _CMP_MASKED_EQ, _LOW32, command))
    for command in (_FIOSETOWN, _SIOCSPGRP):
        rules.deny("ioctl", (1, _CMP_MASKED_EQ, _LOW32, command))
    return rules


def _export_bpf(rules: _Filter) -> bytes:
    """The filter as the kernel loads it: an array of ``struct sock_filter`` (8 bytes each:
    code, jt, jf, k). The rules are released."""
    fd = os.memfd_create("mutagrade-seccomp")
    try:
        rc = rules.lib.seccomp_export_bpf(rules.ctx, fd)
        if rc < 0:
            raise SandboxError(f"seccomp_export_bpf: expected 0, got {rc} ({os.strerror(-rc)})")
        return os.pread(fd, os.fstat(fd).st_size, 0)
    finally:
        os.close(fd)
        rules.lib.seccomp_release(rules.ctx)


# Stands for the child's pid in the compiled allow-list: above any pid Linux hands out
# (at most 2**22), and no other constant of the filter.
_PID_PLACEHOLDER = 0x5EC0_1D5F
_BPF_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K: "is the loaded word equal to k"


@dataclass(frozen=True)
class ChildProgram:
    """The children's allow-list compiled once, in the worker: each child only writes its own
    pid into ``slots`` (the offsets of the comparisons with the placeholder) and loads it,
    instead of building the filter again (about 3 ms a child)."""

    code: bytes
    slots: tuple[int, ...]

    def for_pid(self, pid: int) -> bytes:
        program = bytearray(self.code)
        for offset in self.slots:
            struct.pack_into("<I", program, offset, pid)
        return bytes(program)


def child_allow_program(lib: ctypes.CDLL) -> ChildProgram | None:
    """The allow-list of :func:`child_allow_filter`, compiled with a placeholder pid; None if
    it cannot be compiled here or the placeholder shows up anywhere but in an equality test
    (the children then build the filter themselves)."""
    try:
        code = _export_bpf(child_allow_filter(lib, _PID_PLACEHOLDER))
    except (OSError, SandboxError, AttributeError):
        return None
    if not code or len(code) % 8:
        return None
    slots = []
    for offset in range(0, len(code), 8):
        op, _, _, k = struct.unpack_from("<HBBI", code, offset)
        if k == _PID_PLACEHOLDER:
            if op != _BPF_JEQ_K:
                return None
            slots.append(offset + 4)
    return ChildProgram(code=code, slots=tuple(slots)) if slots else None


def probe_seccomp(describe: bool = True) -> tuple[bool, str]:
    """Whether the seccomp layer works here, and how it is set up or why not; ``describe`` also
    tries whether the children's allow-list installs (a throwaway child)."""
    if not Path("/proc/self/status").read_text().count("Seccomp:"):
        return False, "the kernel has no seccomp support"
    try:
        lib = load_libseccomp()
    except OSError as exc:
        return False, f"libseccomp.so.2 cannot be loaded ({exc}); install the Debian package libseccomp2"
    level = lib.seccomp_api_get()
    if level < 1:
        return False, f"libseccomp found, but the kernel offers no seccomp filters (API level {level})"
    version = lib.seccomp_version().contents
    why_not = _probe_allow_list(lib) if describe else None
    if why_not is None:
        children = "in each child the allow-list where it installs, else the deny-list (mutagrade doctor says which)"
    elif why_not:
        children = (
            "in each child the deny-list: no fork or exec, no signal to any other process (the allow-list "
            f"could not be installed here: {why_not})"
        )
    else:
        children = (
            f"in each child an allow-list of {len(child_syscalls_here())} system calls (threads but no "
            "processes, signals to itself only), everything else fails with EPERM"
        )
    return True, (
        f"libseccomp {version.major}.{version.minor}.{version.micro} (API level {level}): in the worker no "
        "internet, netlink or packet sockets, ptrace, process_vm_*, unshare, bpf, io_uring, keyctl, "
        f"perf_event_open; {children}"
    )


def _probe_allow_list(lib: ctypes.CDLL) -> str:
    """Why the children's allow-list cannot be installed here, or "" if it can: a throwaway
    child installs it, then checks that an unlisted call (personality) fails with EPERM."""
    libc = ctypes.CDLL(None, use_errno=True)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the throwaway child: ctypes and raw descriptors only, then _exit
        why = "the probe did not finish"
        try:
            os.close(read_end)
            child_allow_filter(lib, os.getpid()).load()
            refused = libc.personality(-1) == -1 and ctypes.get_errno() == errno.EPERM
            why = "" if refused else "an unlisted call (personality) was not refused with EPERM"
        except BaseException as exc:  # noqa: BLE001 - the reason goes to the parent
            why = str(exc) or type(exc).__name__
        finally:
            os.write(write_end, why.encode()[:4096])
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        why = reader.read().decode(errors="replace")
    os.waitpid(pid, 0)
    return why

