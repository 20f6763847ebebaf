"""Due dates in the service: every stored upload stamped against its student's due date (the
assignment's, or their extension) by the server's clock; a late one stamped with its penalty, or
refused (403) where the assignment refuses late work; previews stored apart, allowed late, and
limited by their own rate; the submissions page saying, before an upload, what it would be.

Each server runs on a course root of its own whose assignment has a ``[deadline]``
(tests/api/dated_course.py), and grades nothing: what is checked is what is stored at the upload.
"""

from __future__ import annotations

import csv
import io
import re
from datetime import datetime
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.api.conftest import Server, tar_gz
from tests.api.dated_course import (
    BERLIN, course_root, dated_server, database, days, grant_extension, minute, now, user_of,
)

ARCHIVE = tar_gz({"test_gru.py": "def test_it():\n    assert True\n"})
HOUR = days(1 / 24)


def post(client: httpx.Client, path: str = "/v1/submissions", name: str = "tests.tar.gz") -> httpx.Response:
    return client.post(path, files={"archive": (name, ARCHIVE, "application/gzip")})


def text_of(html: str) -> str:
    """What a page shows: its text without tags."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def in_berlin(moment: datetime) -> str:
    """A due date as the service writes it: in the assignment's zone, named."""
    return moment.astimezone(BERLIN).strftime("%Y-%m-%d %H:%M %Z") + " (Europe/Berlin)"


def same_instant(stamped: str, expected: datetime) -> bool:
    return datetime.fromisoformat(stamped) == expected


def started(tmp: Path, root: Path, **settings: str) -> Iterator[Server]:
    server = dated_server(tmp, root, **settings)
    server.start()
    try:
        yield server
    finally:
        server.stop()


# The due dates of the three courses, fixed when the module is loaded: a past one is 1 day and
# 1 hour ago (2 started days late), a future one 3 days ahead.
PAST = minute(now() - days(1) - HOUR)
FUTURE = minute(now() + days(3))


@pytest.fixture(scope="module")
def on_time(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("on-time")
    yield from started(tmp, course_root(tmp, due=FUTURE))


@pytest.fixture(scope="module")
def penalised(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Late work loses 10 % a day, at most 50 %; 2 submissions and 3 previews a minute."""
    tmp = tmp_path_factory.mktemp("penalty")
    yield from started(tmp, course_root(tmp, due=PAST), rate_limit="2", preview_rate_limit="3")


@pytest.fixture(scope="module")
def refusing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("refuse")
    yield from started(tmp, course_root(tmp, due=PAST, late="refuse"))


def test_an_upload_before_the_due_date_is_on_time_and_says_its_due_date(on_time: Server) -> None:
    with on_time.signed_in("olga") as page:
        before = text_of(page.get("/submissions").text)
    assert f"Your due date: {in_berlin(FUTURE)}" in before, before
    assert "An upload now is on time" in before, before
    with on_time.client("olga") as olga:
        created = post(olga)
        assert created.status_code == 202, created.text
        body = olga.get(f"/v1/submissions/{created.json()['id']}").json()
    assert (body["kind"], body["timeliness"], body["days_late"]) == ("submission", "on_time", 0)
    assert body["penalty"] == pytest.approx(0.0) and same_instant(body["due_at"], FUTURE), body
    # Stamped by the server's clock at the upload: the moment stored as its time.
    stored = datetime.fromisoformat(body["created_at"])
    assert abs((stored - now()).total_seconds()) < 60


def test_a_late_upload_is_stored_with_its_days_and_penalty(penalised: Server) -> None:
    with penalised.signed_in("lena") as page:
        before = text_of(page.get("/submissions").text)
    assert f"Your due date: {in_berlin(PAST)}" in before, before
    assert "An upload now is late, 2 days: it loses 20 % of its points" in before, before
    with penalised.client("lena") as lena:
        created = post(lena)
        assert created.status_code == 202, created.text
        body = lena.get(f"/v1/submissions/{created.json()['id']}").json()
    assert (body["kind"], body["timeliness"], body["days_late"]) == ("submission", "late", 2), body
    assert body["penalty"] == pytest.approx(0.2) and same_instant(body["due_at"], PAST)
    with penalised.signed_in("lena") as page:
        listing = text_of(page.get("/submissions").text)
        own = text_of(page.get(f"/submissions/{body['id']}").text)
    assert "late, 2 days: −20 %" in listing and "late, 2 days: −20 %" in own, own


def test_a_late_upload_is_refused_where_late_work_is_and_nothing_is_stored(refusing: Server) -> None:
    with refusing.client("rita") as rita:
        refused = post(rita)
        assert refused.status_code == 403, refused.text
        detail = refused.json()["detail"]
        assert in_berlin(PAST) in detail and "2 days late" in detail, detail
        assert "extension" in detail and "staff" in detail, detail
        assert rita.get("/v1/submissions").json() == []
    with refusing.signed_in("rita") as page:
        before = text_of(page.get("/submissions").text)
        form = page.post("/submissions", data={"csrf": _form_token(page)},
                         files={"archive": ("tests.tar.gz", ARCHIVE, "application/gzip")})
    assert "An upload now is refused: 2 days late" in before and "extension" in before, before
    assert form.status_code == 403 and in_berlin(PAST) in text_of(form.text), form.text
    with database(refusing) as session:
        assert not user_of(session, "rita").submissions


def _form_token(page: httpx.Client) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', page.get("/submissions").text).group(1)


def test_an_extension_is_the_students_own_due_date(refusing: Server, penalised: Server) -> None:
    with refusing.client("eric") as eric:
        assert post(eric).status_code == 403
        extended = minute(now() + days(2))
        grant_extension(refusing, "eric", extended)
        with refusing.signed_in("eric") as page:
            before = text_of(page.get("/submissions").text)
        assert f"Your due date: {in_berlin(extended)}, your extension" in before, before
        assert "An upload now is on time" in before
        created = post(eric)
        assert created.status_code == 202, created.text
        body = eric.get(f"/v1/submissions/{created.json()['id']}").json()
    assert (body["timeliness"], body["days_late"]) == ("on_time", 0) and same_instant(body["due_at"], extended)
    with refusing.client("rita") as rita:  # the others keep the assignment's due date
        assert post(rita).status_code == 403

    # An extension that has passed too is late by its own date: 3 hours ago is 1 day late.
    with penalised.client("ezra") as ezra:
        grant_extension(penalised, "ezra", minute(now() - 3 * HOUR))
        body = ezra.get(f"/v1/submissions/{post(ezra).json()['id']}").json()
    assert (body["timeliness"], body["days_late"]) == ("late", 1) and body["penalty"] == pytest.approx(0.1)


def test_a_late_preview_is_stored_as_a_preview(refusing: Server) -> None:
    with refusing.client("rita") as rita:
        created = post(rita, "/v1/previews")
        assert created.status_code == 202, created.text
        assert created.headers["location"] == f"/v1/submissions/{created.json()['id']}"
        body = rita.get(f"/v1/submissions/{created.json()['id']}").json()
    assert (body["kind"], body["timeliness"], body["days_late"]) == ("preview", "late", 2), body
    with refusing.signed_in("rita") as page:
        shown = text_of(page.get(f"/submissions/{body['id']}").text)
    assert "preview" in shown and "not your grade of record" in shown, shown


def test_previews_have_their_own_rate_limit_and_do_not_count(penalised: Server) -> None:
    with penalised.client("carl") as carl, penalised.client("prof", "staff") as prof:
        previews = [post(carl, "/v1/previews").status_code for _ in range(3)]
        assert previews == [202] * 3
        over = post(carl, "/v1/previews")
        assert over.status_code == 429 and "previews" in over.json()["detail"], over.text
        assert int(over.headers["retry-after"]) > 0
        # Previews took nothing of the submissions' limit (2 a minute), and the reverse.
        assert [post(carl).status_code for _ in range(2)] == [202, 202]
        third = post(carl)
        assert third.status_code == 429 and "submissions" in third.json()["detail"], third.text
        kinds = [s["kind"] for s in carl.get("/v1/submissions").json()]
        assert sorted(kinds) == ["preview"] * 3 + ["submission"] * 2
        gradebook = list(csv.DictReader(io.StringIO(prof.get("/v1/gradebook.csv").text)))
    [row] = [r for r in gradebook if r["student"] == "carl"]
    assert row["submissions"] == "2"  # previews are never in the gradebook


def test_the_rest_api_documents_the_new_fields(on_time: Server) -> None:
    schema = httpx.get(f"{on_time.url}/openapi.json").json()
    fields = schema["components"]["schemas"]["SubmissionPublic"]["properties"]
    assert {"kind", "timeliness", "due_at", "days_late", "penalty"} <= set(fields)
    assert "/v1/previews" in schema["paths"]
    assert {"403", "429"} <= set(schema["paths"]["/v1/submissions"]["post"]["responses"])
