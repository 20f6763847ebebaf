"""What ``mutagrade grade`` is given: a submission, opened as every intake opens one
(:mod:`grader.flows.intake`, whose names this module gives under its older name)."""

from __future__ import annotations

from grader.flows.intake import (
    ARCHIVE_SUFFIXES,
    OpenSubmission,
    Upload,
    is_archive_name,
    open_submission,
    read_archive,
)

__all__ = ["ARCHIVE_SUFFIXES", "OpenSubmission", "Upload", "is_archive_name", "open_submission", "read_archive"]
