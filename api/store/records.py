"""What the work side stores as JSON beside a row and the web side reads back: typed, so
that both read one definition."""

from __future__ import annotations

from pydantic import BaseModel

__all__ = ["GoldenResult", "VariantGolden"]


class VariantGolden(BaseModel):
    id: str
    kind: str
    matches: bool
    max_deviation: float
    worst: str


class GoldenResult(BaseModel):
    """A golden run's result, as stored with the run and sent back."""

    device: str
    dtype: str
    cases: int
    variants: list[VariantGolden]
    cases_per_s: float
    implementation_ok: bool | None = None  # a submission's own package, where one was given
    implementation_problems: list[str] = []
