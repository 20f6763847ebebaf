"""The private names of pytest (and one of the standard library) the worker relies on.

grader.worker.child configures pytest once per job and runs it in each test process through
names pytest does not promise to keep; grader.worker.serve imports pytest's modules ahead. A
pytest upgrade that drops or changes one must fail here, naming it, rather than show up as a
grading where every run crashes.
"""

from __future__ import annotations

import importlib
import inspect
import logging

# (module, attribute path within it, where the worker uses it); None: the module itself.
PRIVATE = [
    ("_pytest.config", None, "setup.import_common"),
    ("_pytest.main", None, "setup.import_common"),
    ("_pytest.python", None, "setup.import_common"),
    ("_pytest.config", "_prepareconfig", "child.TestSession"),
    ("_pytest.config", "Config._do_configure", "child.TestSession"),
    ("_pytest.config", "Config._ensure_unconfigure", "child.TestSession.close"),
    ("_pytest.config", "Config.rootpath", "child.TestSession.run"),
    ("_pytest.main", "Session", "child.TestSession"),
    ("_pytest.main", "Session.from_config", "child.TestSession"),
    ("_pytest.main", "Session.Interrupted", "child.TestSession.run"),
    ("_pytest.assertion.rewrite", "_rewrite_test", "child._rewrite_once"),
    ("_pytest.assertion.rewrite", "AssertionRewritingHook.exec_module", "child._rewrite_once"),
]


def _lookup(module: str, path: str | None) -> object:
    found: object = importlib.import_module(module)
    for name in (path or "").split(".") if path else ():
        found = getattr(found, name)
    return found


def test_every_private_name_the_worker_uses_is_there() -> None:
    missing = []
    for module, path, user in PRIVATE:
        try:
            _lookup(module, path)
        except (ImportError, AttributeError) as exc:
            missing.append(f"{module}{'.' + path if path else ''} (used by grader.worker.{user}): {exc}")
    assert not missing, "pytest no longer has what the worker relies on:\n" + "\n".join(missing)


def test_prepareconfig_takes_args_and_plugins() -> None:
    from _pytest.config import _prepareconfig

    parameters = inspect.signature(_prepareconfig).parameters
    assert list(parameters)[:2] == ["args", "plugins"], f"_pytest.config._prepareconfig{inspect.signature(_prepareconfig)}"


def test_interrupted_is_an_exception_the_run_can_catch() -> None:
    from _pytest.main import Session

    assert isinstance(Session.Interrupted, type) and issubclass(Session.Interrupted, BaseException)


def test_assertion_rewriting_goes_through_the_module_level_rewrite_test() -> None:
    """child._rewrite_once replaces ``rewrite._rewrite_test`` with a cached one: that only helps
    while the import hook calls it by that module-level name, with (path, config)."""
    from _pytest.assertion import rewrite

    assert list(inspect.signature(rewrite._rewrite_test).parameters) == ["fn", "config"]
    source = inspect.getsource(rewrite.AssertionRewritingHook.exec_module)
    assert "_rewrite_test(" in source, "AssertionRewritingHook.exec_module no longer calls _rewrite_test"


def test_the_logging_start_time_the_test_process_resets_is_there() -> None:
    # child.TestSession.run sets logging._startTime afresh; were it gone, that would be silent.
    assert isinstance(getattr(logging, "_startTime", None), float), "logging._startTime is gone"
