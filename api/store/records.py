"""What the work side stores as JSON beside a row and the web side reads back: typed, so
that both read one definition."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["GoldenResult", "VariantGolden"]


class VariantGolden(BaseModel):
    """One variant against torch. A deviation that is no number (a variant whose outputs hold
    NaN or infinity) is stored and sent as the string ``"NaN"`` or ``"Infinity"``: JSON has no
    such numbers."""

    model_config = ConfigDict(ser_json_inf_nan="strings")

    id: str
    kind: str
    matches: bool
    max_deviation: float
    worst: str


class GoldenResult(BaseModel):
    """A golden run's result, as stored with the run and sent back."""

    model_config = ConfigDict(ser_json_inf_nan="strings")

    device: str
    dtype: str
    cases: int
    variants: list[VariantGolden]
    cases_per_s: float
    implementation_ok: bool | None = None  # a submission's own package, where one was given
    implementation_problems: list[str] = []
