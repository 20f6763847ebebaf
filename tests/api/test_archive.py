"""Uploaded archives as students make them: with ``tar`` and ``zip`` themselves, the ``.``
entry and ``./`` prefixes ``tar -C dir .`` writes, and the one folder ``zip -r sub.zip mytests``
wraps the files in; and what is still refused."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from api.archive import ArchiveError, ArchiveLimits, check_archive, unpack
from tests.api.conftest import STUDENT, tar_gz, wait_done

TESTS = "python/tests/l3-3-gru"


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
    return unpack(data, dest, ArchiveLimits())


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
