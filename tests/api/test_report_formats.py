"""What a student reads from the service, over real HTTP: the text of a failed assertion in the
report, the Markdown report beside the others, and a clear error for an upload without a test
file."""

from __future__ import annotations

import httpx

from tests.api.conftest import tar_gz, wait_done

SUITE = '''import math
import numpy as np
from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.gru import gru_cell


def hand(h=0.5):
    w = [Tensor(a, dtype=np.float64) for a in ([[0.0]] * 3, [[0.0], [0.0], [1.0]], [0, math.log(3), 0], [0, 0, 1.0])]
    return gru_cell(Tensor([[1.0]], dtype=np.float64), Tensor([[h]], dtype=np.float64), *w)


def test_hand():
    assert np.allclose(hand().data, [[0.25 * np.tanh(0.75) + 0.375]])


def test_wrong_expectation():
    np.testing.assert_allclose(hand().data, [[0.6]])
'''


def post(client: httpx.Client, data: bytes, name: str = "sub.tar.gz") -> httpx.Response:
    return client.post("/v1/submissions", files={"archive": (name, data)})


def test_the_report_says_what_mismatched_and_comes_in_markdown_too(server) -> None:
    alice, bob = server.client("alice"), server.client("bob")
    answer = post(alice, tar_gz({"test_gru.py": SUITE}))
    assert answer.status_code == 202, answer.text
    submission = answer.json()["id"]
    body = wait_done(alice, submission)
    assert body["status"] == "done", body
    [wrong] = [t for t in body["report"]["tests"] if t["id"].endswith("::test_wrong_expectation")]
    assert wrong["status"] == "wrong" and "Mismatched elements: 1 / 1" in wrong["reason"], wrong

    link = body["links"]["report_md"]
    assert link == f"/v1/submissions/{submission}/report.md"
    markdown = alice.get(link)
    assert markdown.status_code == 200, markdown.text
    assert markdown.headers["content-type"].startswith("text/markdown")
    assert "mutagrade: NOT PASSED" in markdown.text and "Mismatched elements: 1 / 1" in markdown.text
    assert "test\\_wrong\\_expectation" in markdown.text or "test_wrong_expectation" in markdown.text
    assert bob.get(link).status_code == 404  # another student's: as if it did not exist
    assert httpx.get(f"{server.url}{link}").status_code == 401
    assert alice.get("/v1/submissions/999999/report.md").status_code == 404
    assert alice.get("/healthz").status_code == 200  # and the next request is served as usual


def test_an_upload_without_a_test_file_says_so_and_names_no_temporary_folder(server) -> None:
    alice = server.client("alice")
    answer = post(alice, tar_gz({"helpers.py": "def helper():\n    return 1\n"}), name="mine.tar.gz")
    assert answer.status_code == 202, answer.text
    body = wait_done(alice, answer.json()["id"])
    assert body["status"] == "error", body
    error = body["error"]
    assert error.startswith("could not be graded: mine.tar.gz: no test_*.py or *_test.py file was found"), error
    assert "helpers.py" in error and "/tmp" not in error, error
    not_ready = alice.get(body["links"]["report_md"])
    assert not_ready.status_code == 409 and "could not be graded" in not_ready.json()["detail"]
