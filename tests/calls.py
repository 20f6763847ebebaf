"""Recording the order in which functions are called, for tests that check what runs first."""

from __future__ import annotations

from typing import Any


def record_calls(monkeypatch: Any, order: list[str], **targets: tuple[Any, str]) -> None:
    """Replace each ``module.name`` given as ``label=(module, name)`` by a function that appends
    ``label`` to ``order`` and then calls the original."""
    for label, (module, name) in targets.items():
        original = getattr(module, name)

        def recording(*args: Any, _original: Any = original, _label: str = label, **kwargs: Any) -> Any:
            order.append(_label)
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, name, recording)
