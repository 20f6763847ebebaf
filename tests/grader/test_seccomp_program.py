"""The children's seccomp allow-list, compiled once per worker: the program a child loads,
patched with its own pid, is exactly the one libseccomp builds for that pid, and it holds in a
real child (signals to itself only, unlisted calls refused)."""

from __future__ import annotations

import ctypes
import errno
import os

import pytest

from grader.core.protocol import WorkerSandbox
from grader.sandbox.harden import ChildHardening
from grader.sandbox.seccomp import (
    _export_bpf,
    child_allow_filter,
    child_allow_program,
    load_libseccomp,
)


@pytest.mark.parametrize("pid", [1, 2, 4242, 65535, 65536, 4_194_303, os.getpid()])
def test_the_patched_program_is_the_one_built_for_that_pid(pid):
    lib = load_libseccomp()
    program = child_allow_program(lib)
    assert program is not None
    assert program.slots, "the pid never appears: nothing to patch"
    assert program.for_pid(pid) == _export_bpf(child_allow_filter(lib, pid))


def test_a_child_under_the_compiled_program_signals_only_itself():
    lib = load_libseccomp()
    hardening = ChildHardening(settings=WorkerSandbox(seccomp=True), run_timeout=5.0, libseccomp=lib,
                               allow_program=child_allow_program(lib))
    parent = os.getpid()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: ctypes and raw descriptors only, then _exit
        verdict = "child failed before its checks"
        try:
            os.close(read_end)
            libc = ctypes.CDLL(None, use_errno=True)
            hardening.apply()
            own = libc.kill(os.getpid(), 0)
            other = libc.kill(parent, 0) == -1 and ctypes.get_errno() == errno.EPERM
            unlisted = libc.personality(-1) == -1 and ctypes.get_errno() == errno.EPERM
            verdict = f"own={own} other_refused={other} unlisted_refused={unlisted}"
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            verdict = f"error: {exc!r}"
        finally:
            os.write(write_end, verdict.encode())
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        verdict = reader.read().decode()
    os.waitpid(pid, 0)
    assert verdict == "own=0 other_refused=True unlisted_refused=True"
