"""The REST bodies of the staff's class views: the class's statistics and the similarity of
its suites, each with when it was computed and the submissions it was computed from."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from grader.core.classstats import ClassStats
from grader.core.similarity import SimilarityResult

__all__ = ["SimilarityAnswer", "StatsAnswer"]


class StatsAnswer(BaseModel):
    """``GET /v1/stats.json``."""

    computed_at: datetime
    submissions: list[int] = Field(description="the graded submission that stands for each student, by id")
    stats: ClassStats


class SimilarityAnswer(BaseModel):
    """``GET /v1/similarity.json``."""

    computed_at: datetime
    submissions: dict[str, int] = Field(description="each student compared: the submission whose suite was read")
    result: SimilarityResult
    links: list[str] = Field(description="the side-by-side page of each pair, in the pairs' order")
