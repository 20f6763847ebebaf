"""Due dates and the late policy: a deadline read from the assignment's ``[deadline]`` table, and
each submission time judged on time, late (with its penalty) or refused."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from pydantic import ValidationError

from grader.core.assignment import AssignmentError, load_assignment
from grader.core.deadlines import Deadline, Timeliness, judge
from grader.core.paths import default_layout

BERLIN = ZoneInfo("Europe/Berlin")
DUE = datetime(2026, 12, 11, 23, 59, tzinfo=BERLIN)


def deadline(**fields) -> Deadline:
    return Deadline.model_validate({"due": DUE, "penalty_per_day": 0.1, "penalty_cap": 0.5, **fields})


# ------------------------------------------------------------------ reading a deadline
def test_a_local_due_date_takes_the_named_timezone() -> None:
    read = Deadline.model_validate({"due": "2026-12-11T23:59", "timezone": "Europe/Berlin", "penalty_per_day": 0.1})
    assert read.due == DUE and read.due.utcoffset() == timedelta(hours=1)  # CET in December
    summer = Deadline.model_validate({"due": "2026-07-01T12:00", "timezone": "Europe/Berlin", "penalty_per_day": 0})
    assert summer.due.utcoffset() == timedelta(hours=2)  # CEST: the zone, not a fixed offset
    assert read.grace_minutes == 0 and read.late == "penalty" and read.penalty_cap == 1.0


def test_a_due_date_with_an_offset_needs_no_timezone() -> None:
    read = Deadline.model_validate({"due": "2026-12-11T22:59:00Z", "penalty_per_day": 0.1})
    assert read.due == DUE
    offset = Deadline.model_validate({"due": "2026-12-11T23:59+01:00", "late": "refuse"})
    assert offset.due == DUE and offset.due.tzinfo is not None


@pytest.mark.parametrize(
    ("fields", "field", "expected"),
    [
        ({"due": "2026-12-11T23:59"}, "due", "an offset"),
        ({"due": datetime(2026, 12, 11, 23, 59)}, "due", "timezone"),
        ({"due": "2026-12-11"}, "due", "a date and a time"),
        ({"due": "next friday"}, "due", "'next friday'"),
        ({"due": "2026-12-11T23:59", "timezone": "Mars/Olympus_Mons"}, "timezone", "'Mars/Olympus_Mons'"),
        ({"due": DUE, "penalty_per_day": 1.5}, "penalty_per_day", "less than or equal to 1"),
        ({"due": DUE, "penalty_per_day": 0.1, "penalty_cap": -0.1}, "penalty_cap", "greater than or equal to 0"),
        ({"due": DUE, "penalty_per_day": 0.1, "grace_minutes": -5}, "grace_minutes", "greater than or equal to 0"),
        ({"due": DUE, "late": "accept"}, "late", "'refuse' or 'penalty'"),
        ({"due": DUE}, "penalty_per_day", 'late = "penalty"'),
        ({"due": DUE, "penalty_per_day": 0.1, "colour": "red"}, "colour", "Extra inputs"),
    ],
)
def test_a_bad_deadline_names_the_field_and_what_was_expected(fields: dict, field: str, expected: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Deadline.model_validate(fields)
    text = str(caught.value)
    assert field in text and expected in text, text


def test_a_deadline_is_a_value() -> None:
    read = deadline()
    with pytest.raises(ValidationError):
        read.grace_minutes = 10  # type: ignore[misc]
    assert read == deadline() and hash(read) == hash(deadline())


# ---------------------------------------------------------------------- judging a time
def test_no_deadline_is_always_on_time() -> None:
    years_later = DUE + timedelta(days=3650)
    assert judge(years_later, None) == Timeliness(status="on_time", days_late=0, penalty=0.0, due=None)


def test_before_and_at_the_due_date_is_on_time() -> None:
    for at in (DUE - timedelta(days=2), DUE):
        judged = judge(at, deadline())
        assert (judged.status, judged.days_late, judged.penalty, judged.due) == ("on_time", 0, 0.0, DUE)


def test_within_the_grace_minutes_is_on_time_and_the_days_count_after_them() -> None:
    graced = deadline(grace_minutes=15)
    assert judge(DUE + timedelta(minutes=15), graced).status == "on_time"
    just_after = judge(DUE + timedelta(minutes=15, seconds=1), graced)
    assert (just_after.status, just_after.days_late) == ("late", 1)
    # 24 h after the due date is within the first day after grace; one second past it starts the second.
    assert judge(DUE + timedelta(hours=24, minutes=15), graced).days_late == 1
    assert judge(DUE + timedelta(hours=24, minutes=15, seconds=1), graced).days_late == 2


def test_each_started_day_costs_the_penalty_up_to_the_cap() -> None:
    rule = deadline()  # 0.1 a day, at most 0.5
    penalties = [judge(DUE + timedelta(days=d, minutes=1), rule) for d in range(8)]
    assert [p.days_late for p in penalties] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert [p.status for p in penalties] == ["late"] * 8
    assert [p.penalty for p in penalties] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5, 0.5, 0.5, 0.5])


def test_a_refusing_deadline_refuses_late_work_whatever_the_penalty() -> None:
    rule = deadline(late="refuse", grace_minutes=5)
    assert judge(DUE + timedelta(minutes=5), rule).status == "on_time"
    refused = judge(DUE + timedelta(minutes=6), rule)
    assert (refused.status, refused.days_late, refused.penalty) == ("refused", 1, 1.0)


def test_an_extension_replaces_the_due_date_for_that_student() -> None:
    extension = DUE + timedelta(days=3)
    rule = deadline()
    on_time = judge(DUE + timedelta(days=2), rule, extension=extension)
    assert (on_time.status, on_time.due) == ("on_time", extension)
    late = judge(extension + timedelta(hours=30), rule, extension=extension)
    assert (late.status, late.days_late, late.due) == ("late", 2, extension)
    assert late.penalty == pytest.approx(0.2)
    # An extension may also be earlier (a student who must hand in before leaving).
    assert judge(DUE - timedelta(hours=1), rule, extension=DUE - timedelta(hours=2)).days_late == 1


def test_times_in_other_zones_compare_as_instants() -> None:
    rule = deadline()
    utc_before = datetime(2026, 12, 11, 22, 58, tzinfo=timezone.utc)  # 23:58 in Berlin
    utc_after = datetime(2026, 12, 11, 23, 0, tzinfo=timezone.utc)  # 00:00 in Berlin
    assert judge(utc_before, rule).status == "on_time"
    assert judge(utc_after, rule).status == "late"


@pytest.mark.parametrize("which", ["at", "extension"])
def test_a_naive_time_is_refused(which: str) -> None:
    naive = datetime(2026, 12, 11, 23, 0)
    with pytest.raises(ValueError, match=rf"{which}: expected a timezone-aware datetime.*2026-12-11 23:00"):
        if which == "at":
            judge(naive, deadline())
        else:
            judge(DUE, deadline(), extension=naive)
    with pytest.raises(ValueError, match="at: expected a timezone-aware datetime"):
        judge(naive, None)  # no deadline excuses no naive time


def test_a_timeliness_says_itself_in_words() -> None:
    rule = deadline(penalty_per_day=0.25)
    assert judge(DUE, rule).words == "on time"
    assert judge(DUE + timedelta(minutes=1), rule).words == "late, 1 day"
    assert judge(DUE + timedelta(days=2), rule).words == "late, 2 days"
    assert judge(DUE + timedelta(days=2), deadline(late="refuse")).words == "refused, 2 days late"


# -------------------------------------------------------- the assignment's [deadline]
ASSIGNMENT = default_layout().assignment


def _assignment(tmp_path: Path, extra: str, top: str = "") -> Path:
    """The bundled assignment with ``top`` (``key = value``) in place of its line of that key,
    and ``extra`` tables before ``[limits]``."""
    text = ASSIGNMENT.read_text(encoding="utf-8")
    if top:
        key = top.split("=", 1)[0].strip()
        lines = [line for line in text.splitlines() if not line.startswith(f"{key} =")]
        text = "\n".join(lines) + "\n"
    head, limits = text.split("[limits]", 1)
    path = tmp_path / "assignment.toml"
    path.write_text(head + top + "\n" + extra + "\n[limits]" + limits, encoding="utf-8")
    return path


def test_the_bundled_assignment_has_no_deadline_and_a_hundred_points() -> None:
    assignment = load_assignment(ASSIGNMENT)
    assert assignment.deadline is None
    assert assignment.points == 100.0 and assignment.grade_of_record == "latest_on_time"


def test_the_assignment_reads_its_deadline_table(tmp_path: Path) -> None:
    path = _assignment(tmp_path, '[deadline]\ndue = "2026-12-11T23:59"\ntimezone = "Europe/Berlin"\n'
                                 'grace_minutes = 15\npenalty_per_day = 0.1\npenalty_cap = 0.5\n')
    read = load_assignment(path).deadline
    assert read is not None and read.due == DUE and read.grace_minutes == 15
    assert judge(DUE + timedelta(days=1), read).penalty == pytest.approx(0.1)


def test_the_assignment_takes_a_toml_datetime_too(tmp_path: Path) -> None:
    path = _assignment(tmp_path, "[deadline]\ndue = 2026-12-11T23:59:00+01:00\nlate = \"refuse\"\n")
    read = load_assignment(path).deadline
    assert read is not None and read.due == DUE and read.late == "refuse"


@pytest.mark.parametrize(
    ("extra", "top", "expected"),
    [
        ('[deadline]\ndue = "2026-12-11T23:59"\npenalty_per_day = 0.1\n', "", "field deadline.due"),
        ('[deadline]\ndue = "2026-12-11T23:59"\ntimezone = "Berlin"\npenalty_per_day = 0.1\n', "",
         "field deadline.timezone"),
        ('[deadline]\ndue = 2026-12-11\npenalty_per_day = 0.1\n', "", "field deadline.due"),
        ("", "points = 0\n", "field points"),
        ("", 'grade_of_record = "first"\n', "field grade_of_record"),
    ],
)
def test_a_bad_deadline_or_points_in_the_assignment_names_file_and_field(
        tmp_path: Path, extra: str, top: str, expected: str) -> None:
    path = _assignment(tmp_path, extra, top)
    with pytest.raises(AssignmentError) as caught:
        load_assignment(path)
    assert str(path) in str(caught.value) and expected in str(caught.value)
