"""``mutagrade demo``: the sandbox it runs in, wherever the machine stands."""

from __future__ import annotations

from grader.flows.demo import demo_sandbox
from grader.sandbox.base import Layer, LayerStatus, SandboxMode, SandboxStatus
from grader.sandbox.status import sandbox_status


def _status(*, inactive: set[Layer]) -> SandboxStatus:
    return SandboxStatus(
        layers=tuple(LayerStatus(layer=layer, active=layer not in inactive, detail="why") for layer in Layer)
    )


def test_a_machine_with_the_sandbox_runs_the_demo_in_it_and_says_nothing():
    assert demo_sandbox(_status(inactive=set())) == (SandboxMode.AUTO, None)
    # The layers auto uses only where available do not change that.
    assert demo_sandbox(_status(inactive={Layer.SECCOMP, Layer.BUBBLEWRAP})) == (SandboxMode.AUTO, None)
    # Nor a user without root whose workers each get a user namespace instead of a sandbox user.
    assert demo_sandbox(_status(inactive={Layer.UID})) == (SandboxMode.AUTO, None)


def test_a_machine_without_it_runs_the_trusted_demo_unsandboxed_and_says_so_in_one_line():
    mode, line = demo_sandbox(_status(inactive={Layer.UID, Layer.USERNS, Layer.WORKDIR}))
    assert mode is SandboxMode.NONE
    assert line is not None and "\n" not in line
    assert "uid, userns, workdir" in line and "--sandbox none" in line
    assert "scripts/setup-sandbox.sh" in line and "refuse" in line and "user namespaces" in line


def test_this_machine_gets_the_mode_its_sandbox_allows():
    status = sandbox_status()
    mode, line = demo_sandbox(status)
    assert (mode is SandboxMode.AUTO) == (not status.missing(SandboxMode.AUTO))
    assert (line is None) == (mode is SandboxMode.AUTO)
