"""A standard-library module imported when it is first used, not when it is first named.

``importlib.metadata`` is imported by pytest and by pydantic at their own start, and used by
neither in a grading (pytest only reads it to load installed plugins, which workers turn off;
pydantic only to look for its plugins, which the command turns off). Importing it costs about
20 ms of CPU a process (it brings ``email``, ``zipfile`` and ``csv`` with it): in a grading,
that is three processes, the command and its two workers.

:func:`defer` puts a stand-in under the module's name. Naming it (``import importlib.metadata``)
costs nothing; using it (an attribute, or one of its functions imported by name) imports the
real module, which from then on is the one in ``sys.modules``, and the stand-in forwards to it.
So code that uses the module sees no difference, tests run by a worker included.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from typing import Any, Callable

__all__ = ["defer", "deferred"]

# The functions others import by name at their own start (``from importlib.metadata import
# entry_points``): the stand-in has each as a function that imports the module when called.
_FUNCTIONS = {
    "importlib.metadata": (
        "distribution", "distributions", "entry_points", "files", "metadata",
        "packages_distributions", "requires", "version",
    ),
}


class _StandIn(types.ModuleType):
    """Stands for a module not imported yet; any attribute it lacks imports the real one."""

    def __getattr__(self, name: str) -> Any:
        return getattr(_load(self), name)


_LOCK = threading.RLock()


def _load(stand_in: _StandIn) -> types.ModuleType:
    """The real module, imported the first time (once, whichever thread asks first)."""
    with _LOCK:
        real = stand_in.__dict__.get("_real_module")
        if real is None:
            name = stand_in.__name__
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]
            real = importlib.import_module(name)
            # Whoever kept the stand-in (a module that imported it by name) now reaches the
            # real module's own attributes, functions included.
            stand_in.__dict__.update(real.__dict__)
            stand_in.__dict__["_real_module"] = real
        return real


def _forwarding(stand_in: _StandIn, name: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(_load(stand_in), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__module__ = stand_in.__name__
    return call


def defer(name: str) -> None:
    """Put a stand-in for the module ``name`` (one of this module's known ones) in
    ``sys.modules``, unless the module is imported already."""
    if name in sys.modules:
        return
    parent, _, child = name.rpartition(".")
    spec = importlib.util.find_spec(name)
    if spec is None:
        return
    stand_in = _StandIn(name)
    # The real spec, not the module's: ``import`` reads it (is the module being imported?)
    # without this counting as a use.
    stand_in.__spec__ = spec
    stand_in.__file__ = spec.origin
    if spec.submodule_search_locations is not None:
        # A package: ``from package import name`` looks for ``__path__`` first.
        stand_in.__path__ = list(spec.submodule_search_locations)
    for function in _FUNCTIONS.get(name, ()):
        setattr(stand_in, function, _forwarding(stand_in, function))
    sys.modules[name] = stand_in
    if parent:
        setattr(sys.modules[parent], child, stand_in)


def deferred(name: str) -> bool:
    """Whether ``name`` is still a stand-in, its real module not imported yet."""
    module = sys.modules.get(name)
    return isinstance(module, _StandIn) and "_real_module" not in module.__dict__
