"""The worker's wire protocol: frames over a pipe, and the job and run headers they carry."""

from __future__ import annotations

import json

import os
import struct
from collections.abc import Iterator
from dataclasses import asdict

import pytest

from grader.core.protocol import (
    FrameError,
    JobSettings,
    RunHeader,
    WorkerSandbox,
    encode_frame,
    read_exact,
    read_frame,
)


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    """A pipe: (read end, write end); the test closes the write end when it is done writing."""
    read, write = os.pipe()
    yield read, write
    for fd in (read, write):
        try:
            os.close(fd)
        except OSError:
            pass


def _written(pipe: tuple[int, int], data: bytes) -> int:
    """The read end of ``pipe`` after ``data`` was written and the stream ended."""
    read, write = pipe
    os.write(write, data)
    os.close(write)
    return read


def test_a_frame_round_trips(pipe: tuple[int, int]) -> None:
    message = {"run": {"run_id": 3, "select": ["t.py::a", "t.py::é"]}, "n": 1.5, "ok": None}
    frame = encode_frame(message)
    assert struct.unpack(">I", frame[:4])[0] == len(frame) - 4
    assert read_frame(_written(pipe, frame)) == message


def test_frames_in_a_row_then_the_end(pipe: tuple[int, int]) -> None:
    messages = [{"job": {"tests": "x"}}, {"run": {"run_id": 0}}, {}, {"end": True}]
    fd = _written(pipe, b"".join(encode_frame(m) for m in messages))
    assert [read_frame(fd) for _ in messages] == messages
    assert read_frame(fd) is None
    assert read_frame(fd) is None


def test_raw_bytes_after_a_frame_stay_in_the_stream(pipe: tuple[int, int]) -> None:
    # A run's source follows its header as raw bytes: read_frame must not read into them.
    source = b"def gru(): ...\n"
    fd = _written(pipe, encode_frame({"run": {"source_bytes": len(source)}}) + source + encode_frame({"end": True}))
    header = read_frame(fd)
    assert header == {"run": {"source_bytes": len(source)}}
    assert read_exact(fd, header["run"]["source_bytes"]) == source
    assert read_frame(fd) == {"end": True}


def test_read_exact_returns_fewer_bytes_only_at_the_end(pipe: tuple[int, int]) -> None:
    fd = _written(pipe, b"abcdef")
    assert read_exact(fd, 4) == b"abcd"
    assert read_exact(fd, 10) == b"ef"
    assert read_exact(fd, 1) == b""


def test_an_empty_stream_has_no_frame(pipe: tuple[int, int]) -> None:
    assert read_frame(_written(pipe, b"")) is None


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"\x00\x00", "inside a frame's length"),
        (struct.pack(">I", 10) + b'{"a":', "expected 10 bytes, got 5"),
        (struct.pack(">I", 16 * 1024 * 1024 + 1), "at most"),
        (struct.pack(">I", 0xFFFFFFFF) + b"{}", "at most"),
        (struct.pack(">I", 3) + b"{x}", "not JSON"),
        (struct.pack(">I", 2) + b"[]", "JSON object, got list"),
        (struct.pack(">I", 1) + b"7", "JSON object, got int"),
    ],
)
def test_a_broken_frame_raises(pipe: tuple[int, int], data: bytes, words: str) -> None:
    with pytest.raises(FrameError, match=words):
        read_frame(_written(pipe, data))


def test_the_frame_cap_is_not_read_past(pipe: tuple[int, int]) -> None:
    # An oversize length is refused from the length alone: nothing of the body is read.
    read, write = pipe
    os.write(write, struct.pack(">I", 1 << 30) + b"tail")
    with pytest.raises(FrameError):
        read_frame(read)
    os.close(write)
    assert os.read(read, 10) == b"tail"


def test_frame_error_is_a_value_error() -> None:
    assert issubclass(FrameError, ValueError)


def test_run_header_round_trips(pipe: tuple[int, int]) -> None:
    header = RunHeader(run_id=7, source_bytes=123, code_bytes=45, select=["a", "b"], tests="snap/1",
                       time_limits={"a": 1.5}, stop_at_first_kill=True, cpu_budget=12.5, wall_budget=3.0,
                       timeout_floor=1.0)
    message = read_frame(_written(pipe, header.to_frame()))
    assert set(message) == {"run"}
    assert RunHeader.from_message(message) == header


def test_run_header_defaults_survive_the_trip() -> None:
    header = RunHeader(run_id=0, source_bytes=0)
    assert RunHeader.from_message({"run": asdict(header)}) == header


def test_job_settings_round_trip_with_their_sandbox(pipe: tuple[int, int]) -> None:
    sandbox = WorkerSandbox(cpu_seconds=60, file_bytes=1024, open_files=64, processes=8, seccomp=True, tmp_bytes=4096)
    job = JobSettings(reference="/r", tests="/t", hash_seed=2, jobs=3, run_timeout=9.0, test_timeout=2.0,
                      memory_bytes=1 << 28, memory_share=1 << 27, memory_bound=1 << 28, conftests=True,
                      isolate=True, collect_timeout=4.0, max_tests=50, private_tmp=True, sandbox=sandbox)
    message = read_frame(_written(pipe, job.to_frame()))
    assert set(message) == {"job"}
    back = JobSettings.from_message(message)
    assert back == job
    assert isinstance(back.sandbox, WorkerSandbox) and back.sandbox.seccomp is True


# A job's limits have no defaults (the grader derives them from the assignment's).
LIMITS = {"jobs": 1, "run_timeout": 120.0, "test_timeout": 10.0, "collect_timeout": 10.0, "memory_bytes": 1 << 31,
          "memory_share": None, "memory_bound": 0, "max_tests": None}


def test_job_settings_without_a_sandbox_get_the_default() -> None:
    back = JobSettings.from_message({"job": {"reference": "/r", "tests": "/t", "hash_seed": 1, **LIMITS, "sandbox": None}})
    assert back.sandbox == WorkerSandbox()
    assert back == JobSettings(reference="/r", tests="/t", hash_seed=1, **LIMITS)


def test_a_job_without_its_limits_is_malformed() -> None:
    # The worker reports such a frame as malformed rather than run under limits of its own.
    with pytest.raises(TypeError, match="test_timeout"):
        JobSettings.from_message({"job": {"reference": "/r", "tests": "/t", "hash_seed": 1}})


def test_unknown_keys_are_ignored() -> None:
    # A newer grader may send fields an older worker does not know: they are dropped, not fatal.
    run = RunHeader.from_message({"run": {"run_id": 1, "source_bytes": 2, "from_the_future": [1]}})
    assert run == RunHeader(run_id=1, source_bytes=2)
    job = JobSettings.from_message({"job": {"reference": "/r", "tests": "/t", "hash_seed": 1, **LIMITS, "colour": "blue"}})
    assert job == JobSettings(reference="/r", tests="/t", hash_seed=1, **LIMITS)
    assert not hasattr(job, "colour")


def test_a_missing_required_field_is_an_error() -> None:
    with pytest.raises(TypeError):
        RunHeader.from_message({"run": {"run_id": 1}})
    with pytest.raises(KeyError):
        RunHeader.from_message({"job": {}})


def test_worker_sandbox_replace_changes_only_what_it_names() -> None:
    base = WorkerSandbox(open_files=10)
    changed = base.replace(seccomp=True)
    assert changed == WorkerSandbox(open_files=10, seccomp=True)
    assert base.seccomp is False  # frozen: the original stays as it was


def test_a_suite_run_is_the_workers_run_result_with_what_only_the_grader_knows() -> None:
    """One run result type: the grader's SuiteRun holds the fields of the worker's RunResult
    (less the run's number), and its variant and purpose; a TestOutcome those of a TestResult."""
    from dataclasses import fields as dataclass_fields

    from grader.core.models import SuiteRun, TestOutcome
    from grader.core.protocol import RunResult, TestResult

    wire = {f.name for f in dataclass_fields(RunResult)} - {"run_id"}
    assert set(SuiteRun.model_fields) == wire | {"variant", "purpose"}
    assert set(TestOutcome.model_fields) == {f.name for f in dataclass_fields(TestResult)}


def test_a_run_result_line_reads_back_as_a_suite_run() -> None:
    from grader.core.models import Budget, Outcome, Purpose, SuiteRun
    from grader.core.protocol import RunResult, TestResult

    result = RunResult(run_id=7, hash_seed=2, results=(TestResult("t.py::a", Outcome.FAILED, "no", 0.5, "t.py:3"),),
                       crashed="", budget=Budget.WALL, budget_exceeded="t.py::a", phases={"run": 0.5})
    data = json.loads(result.to_line())
    assert data.pop("run_id") == 7
    run = SuiteRun.model_validate({**data, "variant": "s01", "purpose": "confirming"})
    assert run.outcome("t.py::a") is Outcome.FAILED and run.budget is Budget.WALL and run.purpose is Purpose.CONFIRMING
    assert run.results[0].message == "no" and run.phases == {"run": 0.5}
    assert run.results[0].raised_in == "t.py:3"
