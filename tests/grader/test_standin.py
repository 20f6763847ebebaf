"""The stand-in ``tinyllm.rnn.gru`` computes exactly what the variant computes in-process.

Each test builds the same thing twice, once with a variant loaded in this process and once
through the stand-in connected to that variant served over a socket pair (the implementation
process's loop, here in a thread), and compares outputs, gradients, parameters, generator
states and error messages. The boundary itself is tested last: malformed or hostile bytes get
an error answer, never a crash and never anything executed.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import threading

import numpy as np
import pytest

from grader.flows.golden import load_implementation
from grader.core.paths import default_layout
from grader.core.contract import read_contract
from grader.core.variants import build_variants
from grader.worker import standin
from grader.worker.boundary import BoundaryError, Connection
from grader.worker.impl import serve_implementation
from tinyllm.autograd.tensor import Tensor
from tinyllm.nn.module import Parameter
from tinyllm.random import PCG32

LAYOUT = default_layout()
VARIANTS = {v.id: v for v in build_variants(LAYOUT)}
CONTRACT = read_contract(LAYOUT.contract_stub, LAYOUT.module_under_test)
GRU = standin.build(CONTRACT)  # the module under test as a run's tests see it


class Served:
    """A variant served over a socket pair, with the stand-in connected to it."""

    def __init__(self, variant_id: str) -> None:
        source = VARIANTS[variant_id].source
        self.direct = load_implementation(source, LAYOUT.reference, f"standin_direct_{variant_id}")
        served = load_implementation(source, LAYOUT.reference, f"standin_served_{variant_id}")
        ours, theirs = socket.socketpair()
        self.fd, self._theirs = ours.detach(), theirs.detach()
        self.thread = threading.Thread(target=serve_implementation, args=(Connection(self._theirs), served, CONTRACT), daemon=True)
        self.thread.start()
        self.connection = Connection(self.fd)
        standin.connect(self.connection)

    def close(self) -> None:
        os.close(self.fd)
        self.thread.join(timeout=5)
        os.close(self._theirs)


@pytest.fixture(params=sorted(VARIANTS))
def served(request):
    pair = Served(request.param)
    yield pair
    pair.close()


@pytest.fixture
def reference():
    pair = Served("reference")
    yield pair
    pair.close()


def _inputs(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    batch, d_in, hidden = 2, 3, 4
    return [
        rng.normal(size=(batch, d_in)), rng.normal(size=(batch, hidden)),
        rng.normal(size=(3 * hidden, d_in)), rng.normal(size=(3 * hidden, hidden)),
        rng.normal(size=3 * hidden), rng.normal(size=3 * hidden),
    ]


def _cell_and_grads(gru_cell, arrays):
    leaves = [Tensor(a, requires_grad=True) for a in arrays]
    out = gru_cell(*leaves)
    (out * Tensor(np.linspace(-1, 1, out.data.size).reshape(out.shape))).sum().backward()
    return out.data, [leaf.grad for leaf in leaves]


def test_gru_cell_outputs_and_every_gradient_equal_the_variants_own(served):
    out, grads = _cell_and_grads(GRU.gru_cell, _inputs())
    want_out, want_grads = _cell_and_grads(served.direct.gru_cell, _inputs())
    np.testing.assert_array_equal(out, want_out)
    for got, want in zip(grads, want_grads):
        if want is None:
            assert got is None
        else:
            np.testing.assert_array_equal(got, want)


def _sequence(module_cls, parameter_cls, training: bool, seed: int):
    rng = PCG32(seed)
    gru = module_cls(3, 4, num_layers=2, dropout=0.5, rng=rng)
    x = Tensor(np.random.default_rng(seed).normal(size=(5, 3, 3)), requires_grad=True)
    state = Tensor(np.random.default_rng(seed + 1).normal(size=(2, 3, 4)) * 0.5, requires_grad=True)
    gru.train(training)
    first = gru(x, state, lengths=[5, 2, 3])
    out, h_n = gru(x, state, lengths=[5, 2, 3])  # a second call: dropout draws on from the first
    (out.sum() + (h_n * h_n).sum()).backward()
    params = {name: p.grad for name, p in gru.named_parameters()}
    return {
        "names": [name for name, _ in gru.named_parameters()],
        "state": {k: v for k, v in gru.state_dict().items()},
        "first": first[0].data, "out": out.data, "h_n": h_n.data,
        "x_grad": x.grad, "state_grad": state.grad, "param_grads": params,
        "rng": (rng._state, rng._inc), "attrs": (gru.d_in, gru.d_h, gru.num_layers, gru.dropout),
        "all_parameters": all(isinstance(p, parameter_cls) for p in gru.parameters()),
    }


@pytest.mark.parametrize("training", [True, False])
def test_a_stacked_gru_with_dropout_and_lengths_matches_the_variant(served, training):
    got = _sequence(GRU.GRU, Parameter, training, seed=3)
    want = _sequence(served.direct.GRU, Parameter, training, seed=3)
    assert got["names"] == want["names"]
    assert got["attrs"] == want["attrs"] and got["rng"] == want["rng"] and got["all_parameters"]
    for key in ("first", "out", "h_n", "x_grad", "state_grad"):
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    for name in want["names"]:
        np.testing.assert_array_equal(got["state"][name], want["state"][name], err_msg=name)
        np.testing.assert_array_equal(got["param_grads"][name], want["param_grads"][name], err_msg=name)


def test_parameters_changed_in_place_or_loaded_as_float64_are_the_ones_used(reference):
    cell = GRU.GRUCell(2, 3, rng=PCG32(1))
    mine = reference.direct.GRUCell(2, 3, rng=PCG32(1))
    x = np.ones((1, 2))
    cell.bias_hh.data[:] = 0.7
    mine.bias_hh.data[:] = 0.7
    np.testing.assert_array_equal(cell(x).data, mine(x).data)
    state = {k: v.astype(np.float64) * 2 for k, v in mine.state_dict().items()}
    cell.load_state_dict(state)
    mine.load_state_dict(state)
    got, want = cell(x), mine(x)
    assert got.dtype == want.dtype == np.float64
    np.testing.assert_array_equal(got.data, want.data)


@pytest.mark.parametrize("call", [
    lambda m: m.GRU(3, 0),
    lambda m: m.GRU(-1, 4),
    lambda m: m.GRU(3, 4, num_layers=0),
    lambda m: m.GRU(3, 4, dropout=1.5),
    lambda m: m.GRUCell(3, 4, rng="seed"),
    lambda m: m.GRU(3, 4)(np.zeros((5, 2, 2))),
    lambda m: m.GRU(3, 4)(np.zeros((5, 2, 3)), lengths=[6, 1]),
    lambda m: m.gru_cell(np.zeros((2, 3)), np.zeros((2, 4)), np.zeros((12, 2)), np.zeros((12, 4)), np.zeros(12), np.zeros(12)),
    lambda m: m.gru_cell("text", np.zeros((2, 4)), np.zeros((12, 3)), np.zeros((12, 4)), np.zeros(12), np.zeros(12)),
    lambda m: m.GRU(3, 4, 1, 0.0, None, "one too many"),
])
def test_errors_cross_as_the_same_type_and_message(served, call):
    with pytest.raises(Exception) as want:
        call(served.direct)
    with pytest.raises(Exception) as got:
        call(GRU)
    assert type(got.value) is type(want.value)
    assert str(got.value) == str(want.value)
    assert got.value.__traceback__.tb_next is None or "impl" not in str(got.traceback[-1].path)


def test_s12s_cut_gradient_comes_through_and_differs_from_the_reference():
    grads = {}
    for variant in ("reference", "s12"):
        pair = Served(variant)
        try:
            grads[variant] = _cell_and_grads(GRU.gru_cell, _inputs(1))[1][1]
            np.testing.assert_array_equal(grads[variant], _cell_and_grads(pair.direct.gru_cell, _inputs(1))[1][1])
        finally:
            pair.close()
    assert not np.allclose(grads["reference"], grads["s12"])


def test_backward_twice_accumulates_and_an_old_graph_is_refused_clearly(reference):
    leaves = [Tensor(a, requires_grad=True) for a in _inputs(2)]
    out = GRU.gru_cell(*leaves)
    out.sum().backward()
    once = leaves[0].grad.copy()
    out.sum().backward()
    np.testing.assert_allclose(leaves[0].grad, 2 * once)
    for _ in range(70):  # more calls than the implementation keeps graphs for
        GRU.gru_cell(*leaves)
    with pytest.raises(RuntimeError, match="no longer held"):
        out.sum().backward()


def test_outputs_hold_no_code_or_source_of_the_variant(reference):
    out = GRU.GRU(2, 3)(np.ones((2, 1, 2)))
    assert {type(t).__module__ for t in out} == {"tinyllm.autograd.tensor"}
    assert GRU.GRU.__module__ == "tinyllm.rnn.gru"


# ------------------------------------------------------------------------ the boundary
def _raw(fd: int, header: bytes, tail: bytes = b"") -> None:
    os.write(fd, struct.pack(">I", len(header)) + header + tail)


@pytest.mark.parametrize("header", [
    json.dumps({"op": "call", "arrays": [{"dtype": "|O", "shape": [1]}]}).encode(),
    json.dumps({"op": "call", "arrays": [{"dtype": "<f8", "shape": [-1]}]}).encode(),
    json.dumps({"op": "call", "arrays": [{"dtype": "<f8", "shape": [1 << 40, 1 << 40]}]}).encode(),
    json.dumps([1, 2, 3]).encode(),
    b"\x80\x04\x95pickle",
])
def test_a_malformed_message_is_refused_by_the_reader(header):
    ours, theirs = socket.socketpair()
    try:
        _raw(ours.fileno(), header)
        with pytest.raises(BoundaryError):
            Connection(theirs.fileno()).receive()
    finally:
        ours.close()
        theirs.close()


def test_an_oversized_header_is_refused_before_it_is_read():
    ours, theirs = socket.socketpair()
    try:
        os.write(ours.fileno(), struct.pack(">I", 1 << 30))
        with pytest.raises(BoundaryError, match="at most"):
            Connection(theirs.fileno()).receive()
    finally:
        ours.close()
        theirs.close()


@pytest.mark.parametrize("header", [
    {"op": "bogus"},
    {"op": "new", "cls": "os.system", "args": []},
    {"op": "forward", "handle": 999, "args": []},
    {"op": "call", "fn": "gru_cell", "args": [{"t": "tensor", "a": 5, "grad": True}]},
    {"op": "call", "fn": "gru_cell", "args": [{"t": "opaque", "type": "x y", "repr": "r"}]},
    {"op": "backward", "graph": 12345, "grad": 0},
])
def test_the_implementation_answers_a_hostile_request_with_an_error_and_serves_on(reference, header):
    reference.connection.send(header)
    reply = reference.connection.receive()
    assert reply.header["ok"] is False and reply.header["type"] in ("RuntimeError", "TypeError", "ValueError")
    assert "Traceback" not in reply.header["message"] and "File " not in reply.header["message"]
    # ... and the next request is served as if nothing happened
    out = GRU.gru_cell(*[Tensor(a) for a in _inputs(4)])
    assert out.shape == (2, 4)


ABANDONED = '''
import math

import numpy as np
from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.gru import GRU, gru_cell


def test_a_slow():
    # Runs past its limit while the implementation computes: interrupted mid-call.
    gru = GRU(1, 1)
    gru(Tensor(np.ones((6000, 1, 1))))


def test_b_hand_example():
    weights = ([[0.0]] * 3, [[0.0], [0.0], [1.0]], [0, math.log(3), 0], [0, 0, 1.0])
    w = [Tensor(np.array(a, dtype=np.float64)) for a in weights]
    h = gru_cell(Tensor(np.array([[1.0]])), Tensor(np.array([[0.5]])), *w)
    assert h.shape == (1, 1)
    assert np.allclose(h.data, [[0.25 * np.tanh(0.75) + 0.375]])


def test_c_shapes():
    out, h_n = GRU(2, 3)(Tensor(np.ones((4, 5, 2))))
    assert out.shape == (4, 5, 3) and h_n.shape == (1, 5, 3)
'''


def test_after_a_call_abandoned_at_its_time_limit_every_later_call_gets_its_own_answer(tmp_path):
    """test_a is interrupted while the implementation still computes its forward pass; its
    reply comes later and must not be taken for test_b's (nor test_b's for test_c's)."""
    from grader.core.models import WorkerRun
    from grader.run.runner import WorkerProcess
    from tests.limits import unbudgeted

    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_abandoned.py").write_text(ABANDONED)
    worker = WorkerProcess(layout=LAYOUT, tests_dir=tests, hash_seed=1,
                           limits=unbudgeted(test_timeout_s=30.0), hide_source=True)
    limits = {"test_abandoned.py::test_a_slow": 0.3}
    try:
        worker.submit(WorkerRun(variant="reference", source=VARIANTS["reference"].source, time_limits=limits),
                      timeout_floor=20.0)
        worker.finish()
        [run] = worker.collect(1, timeout=120)
    finally:
        worker.close()
    outcomes = {r.test_id.split("::")[1]: (r.outcome.value, r.message) for r in run.results}
    assert outcomes["test_a_slow"][0] == "timeout", outcomes
    assert outcomes["test_b_hand_example"] == ("passed", ""), outcomes
    assert outcomes["test_c_shapes"] == ("passed", ""), outcomes
