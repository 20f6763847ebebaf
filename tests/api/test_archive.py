"""Uploaded archives as students make them: with ``tar`` and ``zip`` themselves, the ``.``
entry and ``./`` prefixes ``tar -C dir .`` writes, and the one folder ``zip -r sub.zip mytests``
wraps the files in; and what is still refused: names and layouts no file system would take, and
zips whose directory lies about a member's size or CRC, refused before the upload is accepted
and again when a stored archive is staged for grading."""

from __future__ import annotations

import gzip
import io
import json
import shutil
import struct
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from api.store import crud
from grader.flows.archive import ArchiveError, ArchiveLimits, check_archive, unpack
from api.config import Settings
from api.store.db import Submission, make_engine, make_sessionmaker
from api.work.jobs import grade_submission
from api.store.migrate import upgrade
from grader.core.paths import default_layout
from tests.api.conftest import STUDENT, tar_gz, wait_done

LAYOUT = default_layout()
TESTS = str(LAYOUT.student_tests)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A copy of the bundled student repository (its tests, journal and package)."""
    dest = tmp_path / "student"
    shutil.copytree(STUDENT, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


@pytest.fixture
def mytests(tmp_path: Path) -> Path:
    """A folder holding just the test files."""
    dest = tmp_path / "mytests"
    shutil.copytree(STUDENT / TESTS, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _made_by(command: list[str], cwd: Path, out: Path) -> bytes:
    subprocess.run(command, cwd=cwd, check=True, capture_output=True)
    return out.read_bytes()


def _unpacked(data: bytes, dest: Path):
    dest.mkdir()
    return unpack(data, dest, ArchiveLimits(), tests=LAYOUT.student_tests)


def _test_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("test_*.py"))


def test_tar_of_a_folders_contents_with_dot_entries_is_accepted(mytests, tmp_path):
    out = tmp_path / "sub.tgz"
    data = _made_by(["tar", "czf", str(out), "-C", str(mytests), "."], tmp_path, out)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert "." in tar.getnames() and all(n.startswith(".") for n in tar.getnames())  # what tar writes
    assert {m.name for m in check_archive(data, ArchiveLimits())} == set(_test_files(mytests))
    files = _unpacked(data, tmp_path / "dest")
    assert files.tests == tmp_path / "dest" and _test_files(files.tests) == _test_files(mytests)


def test_tar_of_a_whole_repository_with_dot_entries_finds_tests_and_journal(repo, tmp_path):
    out = tmp_path / "sub.tgz"
    data = _made_by(["tar", "czf", str(out), "-C", str(repo), "."], tmp_path, out)
    files = _unpacked(data, tmp_path / "dest")
    assert files.tests == tmp_path / "dest" / TESTS and _test_files(files.tests)
    assert files.journal == tmp_path / "dest" / ".tdd" / "journal.jsonl"
    assert files.implementation == tmp_path / "dest" / "python"


@pytest.mark.parametrize(
    "command",
    [["tar", "czf", "../sub.tgz", "mytests"], ["zip", "-qr", "../sub.zip", "mytests"]],
    ids=["tar-folder", "zip-r-folder"],
)
def test_one_folder_wrapping_the_tests_is_taken_off(mytests, tmp_path, command):
    work = tmp_path / "work"
    work.mkdir()
    shutil.move(mytests, work / "mytests")
    out = tmp_path / command[2].removeprefix("../")
    data = _made_by(command, work, out)
    assert {m.name for m in check_archive(data, ArchiveLimits())} == set(_test_files(work / "mytests"))
    files = _unpacked(data, tmp_path / "dest")
    assert files.tests == tmp_path / "dest" and _test_files(files.tests) == _test_files(work / "mytests")


@pytest.mark.parametrize("tool", ["tar", "zip"])
def test_one_folder_wrapping_a_repository_is_taken_off(repo, tmp_path, tool):
    out = tmp_path / f"sub.{'tgz' if tool == 'tar' else 'zip'}"
    command = ["tar", "czf", str(out), "student"] if tool == "tar" else ["zip", "-qr", str(out), "student"]
    files = _unpacked(_made_by(command, tmp_path, out), tmp_path / "dest")
    assert files.tests == tmp_path / "dest" / TESTS and _test_files(files.tests)
    assert files.journal is not None and files.journal.is_file()


def test_a_repository_at_the_root_is_not_unwrapped():
    # python/ is the only top-level folder here, but it is the repository's own layout.
    data = tar_gz({f"{TESTS}/test_a.py": "def test_a():\n    pass\n"})
    assert [m.name for m in check_archive(data, ArchiveLimits())] == [f"{TESTS}/test_a.py"]


def _tar(members: list[tarfile.TarInfo]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info in members:
            tar.addfile(info, io.BytesIO(b"x = 1\n") if info.isfile() else None)
    return buffer.getvalue()


def _file(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = len(b"x = 1\n")
    return info


def _special(name: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = "/etc/passwd"
    return info


@pytest.mark.parametrize(
    ("members", "words"),
    [
        ([_file("./test_a.py"), _file("./../escape.py")], "'..' is not allowed"),
        ([_file("mytests/test_a.py"), _file("mytests/../../escape.py")], "'..' is not allowed"),
        ([_file("./test_a.py"), _file("/./etc/x.py")], "absolute paths are not allowed"),
        ([_file("mytests/test_a.py"), _special("mytests/link.py", tarfile.SYMTYPE)], "links are not allowed"),
        ([_file("./test_a.py"), _special("./hard.py", tarfile.LNKTYPE)], "links are not allowed"),
        ([_file("mytests/test_a.py"), _special("mytests/dev", tarfile.CHRTYPE)], "devices, fifos"),
        ([_file("./test_a.py"), _file(".")], "an empty path"),
        ([_file("mytests/test_a.py"), _file("mytests/./test_a.py")], "appears twice"),
    ],
    ids=["dot-dotdot", "wrapped-dotdot", "absolute", "wrapped-symlink", "hardlink", "wrapped-device", "dot-file",
         "wrapped-duplicate"],
)
def test_prefixes_and_wrapping_folders_do_not_open_a_way_around_the_rules(members, words):
    with pytest.raises(ArchiveError, match=words) as caught:
        check_archive(_tar(members), ArchiveLimits())
    assert caught.value.status == 422


def test_a_link_packed_by_real_tar_and_zip_is_refused(mytests, tmp_path):
    (mytests / "passwd.py").symlink_to("/etc/passwd")
    tgz, zipped = tmp_path / "sub.tgz", tmp_path / "sub.zip"
    for command, out in ((["tar", "czf", str(tgz), "-C", str(mytests), "."], tgz),
                         (["zip", "-qry", str(zipped), "mytests"], zipped)):
        with pytest.raises(ArchiveError, match="links are not allowed"):
            check_archive(_made_by(command, tmp_path, out), ArchiveLimits())


def test_curl_upload_of_tar_of_a_folders_contents_is_graded(server, repo, tmp_path):
    out = tmp_path / "x.tgz"
    subprocess.run(["tar", "czf", str(out), "-C", str(repo), "."], check=True)
    token = server.token("alice")
    posted = subprocess.run(
        ["curl", "-sS", "-H", f"Authorization: Bearer {token}", "-F", f"archive=@{out}", f"{server.url}/v1/submissions"],
        capture_output=True, text=True, timeout=60, check=True,
    )
    created = json.loads(posted.stdout)
    assert created.get("status") == "queued", posted.stdout
    body = wait_done(server.client("alice"), created["id"])
    assert body["status"] == "done", body
    assert body["passed"] is True and body["kill_rate"] == 1.0
    assert body["report"]["journal"]["ok"] and body["report"]["journal"]["entries"] == 20


# -- names and layouts that cannot be unpacked, and zips whose directory lies ---------------------

def _zip(entries: dict[str, bytes], method: int = zipfile.ZIP_STORED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _lying(data: bytes, name: str, *, file_size: int | None = None, crc: int | None = None) -> bytes:
    """``data`` with the central directory entry of ``name`` declaring another size or CRC
    (what zipfile would never write): the entry is ``PK\\x01\\x02``, its CRC-32 at offset 16,
    its uncompressed size at 24, its name's length at 28 and the name at 46."""
    patched = bytearray(data)
    position = patched.find(b"PK\x01\x02")
    while position >= 0:
        (length,) = struct.unpack_from("<H", patched, position + 28)
        if patched[position + 46:position + 46 + length] == name.encode():
            if crc is not None:
                struct.pack_into("<I", patched, position + 16, crc)
            if file_size is not None:
                struct.pack_into("<I", patched, position + 24, file_size)
            return bytes(patched)
        position = patched.find(b"PK\x01\x02", position + 4)
    raise AssertionError(f"no central directory entry for {name!r}")


def _truncated_tar() -> bytes:
    """A .tar.gz whose one member's header declares 8 KiB of data the archive does not hold."""
    whole = gzip.decompress(tar_gz({"test_a.py": b"# " + b"x" * 8190}))
    return gzip.compress(whole[:512 + 1024])


SOURCE = b"def test_a():\n    assert 1\n" * 4
LONG = "test_" + "x" * 292 + ".py"  # one name of 300 bytes
WIDE = "test_" + "é" * 146 + ".py"  # 154 characters, 300 bytes in UTF-8
DEEP = "/".join(["d" * 200] * 6) + "/test_a.py"  # each folder fits, the whole path is 1,210 bytes

# (archive, the member its message must name, the rule it must state)
REFUSED = {
    "zip-file-and-folder": (_zip({"tests/a": b"x", "tests/a/b.py": SOURCE}), "tests/a", "a file and a folder"),
    "tar-file-and-folder": (tar_gz({"tests/a": b"x", "tests/a/b.py": SOURCE}), "tests/a", "a file and a folder"),
    "tar-folder-then-file": (tar_gz({"tests/a/b.py": SOURCE, "tests/a": b"x"}), "tests/a", "a file and a folder"),
    "zip-folder-entry-and-file": (_zip({"tests/a/": b"", "tests/a": b"x", "tests/b.py": SOURCE}), "tests/a",
                                  "a file and a folder"),
    "zip-long-name": (_zip({LONG: SOURCE}), LONG, "at most 255 bytes"),
    "tar-long-name": (tar_gz({LONG: SOURCE}), LONG, "at most 255 bytes"),
    "zip-wide-name": (_zip({WIDE: SOURCE}), WIDE, "at most 255 bytes"),
    "tar-deep-path": (tar_gz({DEEP: SOURCE}), DEEP[:40], "at most 1024 bytes"),
    "zip-declares-less": (_lying(_zip({"test_a.py": SOURCE}), "test_a.py", file_size=5), "test_a.py", "CRC"),
    "zip-declares-more": (_lying(_zip({"test_a.py": SOURCE}), "test_a.py", file_size=len(SOURCE) + 1000), "test_a.py",
                          f"declares {len(SOURCE) + 1000} bytes"),
    "zip-wrong-crc": (_lying(_zip({"test_a.py": SOURCE}), "test_a.py", crc=0x1234), "test_a.py", "CRC"),
    "zip-bomb-declared-small": (
        _lying(_zip({"test_a.py": SOURCE, "big.txt": b"0" * (30 * 1024 * 1024)}, zipfile.ZIP_DEFLATED), "big.txt",
               file_size=10), "big.txt", "CRC"),
    "tar-truncated": (_truncated_tar(), "test_a.py", "cannot be read"),
}


@pytest.mark.parametrize(("data", "member", "rule"), REFUSED.values(), ids=REFUSED.keys())
def test_what_cannot_be_unpacked_as_it_reads_is_refused_naming_the_member(data, member, rule, tmp_path):
    with pytest.raises(ArchiveError) as caught:
        check_archive(data, ArchiveLimits())
    assert caught.value.status == 422
    # (the closing quote left off: a very long name is shortened in the message)
    assert f"member {member!r}"[:-1] in str(caught.value) and rule in str(caught.value)
    # Staged for grading, the same archive is refused by the same check, never half-written.
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(ArchiveError) as staged:
        unpack(data, dest, ArchiveLimits(), tests=LAYOUT.student_tests)
    assert str(staged.value) == str(caught.value)


def test_a_zip_is_unpacked_to_exactly_the_bytes_checked(tmp_path):
    entries = {"mytests/test_a.py": SOURCE, "mytests/data/table.txt": b"1 2 3\n" * 5000, "mytests/empty.py": b""}
    data = _zip(entries, zipfile.ZIP_DEFLATED)
    checked = {m.name: m.size for m in check_archive(data, ArchiveLimits())}
    files = _unpacked(data, tmp_path / "dest")
    on_disk = {str(p.relative_to(files.root)): p.read_bytes() for p in files.root.rglob("*") if p.is_file()}
    assert on_disk == {name.removeprefix("mytests/"): body for name, body in entries.items()}
    assert checked == {name: len(body) for name, body in on_disk.items()}


def test_names_at_the_bounds_are_accepted(tmp_path):
    name = "test_" + "x" * 247 + ".py"  # 255 bytes
    path = "/".join(["d" * 100] * 9) + "/test_a.py"  # 918 bytes
    data = _zip({name: SOURCE, path: SOURCE})
    assert sorted(m.name for m in check_archive(data, ArchiveLimits())) == sorted([name, path])
    files = _unpacked(data, tmp_path / "dest")
    assert (files.root / name).read_bytes() == SOURCE and (files.root / path).read_bytes() == SOURCE


THREE = ("zip-file-and-folder", "zip-long-name", "zip-declares-less", "zip-declares-more", "zip-wrong-crc")


@pytest.mark.parametrize("case", THREE)
def test_the_service_refuses_them_before_accepting_and_serves_the_next(server, case):
    data, member, rule = REFUSED[case]
    alice = server.client("alice")
    answer = alice.post("/v1/submissions", files={"archive": ("sub.zip", data)})
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"]
    assert detail.startswith("archive 'sub.zip': ") and f"member {member!r}" in detail and rule in detail
    assert alice.get("/v1/submissions").json() == []  # nothing was stored
    good = alice.post("/v1/submissions", files={"archive": ("ok.tar.gz", tar_gz({"test_a.py": SOURCE}))})
    assert good.status_code == 202, good.text
    assert [s["archive_name"] for s in alice.get("/v1/submissions").json()] == ["ok.tar.gz"]


@pytest.mark.parametrize("case", THREE)
def test_a_stored_archive_that_cannot_be_unpacked_is_not_an_internal_error(case, tmp_path):
    """An archive stored before these rules (or by another route) is refused when it is staged
    for grading, with the same message, as bad input."""
    data, member, rule = REFUSED[case]
    url = f"sqlite:///{tmp_path / 'mutagrade.db'}"
    upgrade(url)
    make_session = make_sessionmaker(make_engine(url))
    with make_session() as session:
        user, _ = crud.create_user(session, name="ada", role="student")
        crud.create_submission(session, user=user, assignment="l3-3-gru", archive=data, name="old.zip")
        submission = crud.claim_next(session, worker="w")
    assert grade_submission(submission, settings=Settings(database_url=url), make_session=make_session, worker="w")
    with make_session() as session:
        row = session.get(Submission, submission.id)
    assert row.status == "error" and row.error.startswith("could not be graded: ")
    assert f"member {member!r}" in row.error and rule in row.error
