"""The stand-in and the implementation process take the module under test from its contract
stub, nothing written for one module: the GRU's stub gives the GRU's surface, and the LSTM's
(assignments/l3-2-lstm) is served through a stand-in built from its own stub, computing exactly
what the LSTM computes in-process.
"""

from __future__ import annotations

import os
import socket
import threading
import types

import numpy as np
import pytest

from grader.core.contract import ContractError, read_contract
from grader.core.paths import default_layout, layout_for
from grader.core.protocol import Contract
from grader.flows.golden import load_implementation
from grader.worker import standin
from grader.worker.boundary import Connection
from grader.worker.impl import constant_values, serve_implementation
from tinyllm.autograd.tensor import Tensor
from tinyllm.nn.module import Parameter
from tinyllm.random import PCG32

LAYOUT = default_layout()
LSTM = layout_for(LAYOUT.root, "l3-2-lstm")  # its reference module lives in the shared tinyllm
LSTM_CONTRACT = read_contract(LSTM.contract_stub, "tinyllm.rnn.lstm")


def test_each_stub_gives_its_modules_functions_and_module_classes():
    gru = read_contract(LAYOUT.contract_stub, LAYOUT.module_under_test)
    assert gru == Contract(module="tinyllm.rnn.gru", functions=("gru_cell",), classes=("GRUCell", "GRU"))
    assert LSTM_CONTRACT == Contract(module="tinyllm.rnn.lstm", functions=("lstm_cell",), classes=("LSTMCell", "LSTM"),
                                     constants=("FORGET_BIAS",))
    built = standin.build(LSTM_CONTRACT)
    assert built.__name__ == "tinyllm.rnn.lstm" and built.__all__ == ["lstm_cell", "LSTMCell", "LSTM"]
    assert built.LSTM.__module__ == built.lstm_cell.__module__ == "tinyllm.rnn.lstm"
    assert not hasattr(built, "GRU") and not hasattr(built, "FORGET_BIAS")  # a constant comes with a run


def test_a_contracts_constants_cross_as_plain_values_and_nothing_else():
    """The implementation process sends the contract's constants as the variant defines them,
    plain values only; the stand-in takes those the contract names, and nothing else."""
    variant = types.SimpleNamespace(FORGET_BIAS=0.0, lstm_cell=print)
    assert constant_values(variant, LSTM_CONTRACT) == {"FORGET_BIAS": 0.0}  # a mutant's value, as it is
    assert constant_values(types.SimpleNamespace(FORGET_BIAS=object()), LSTM_CONTRACT) == {}
    assert constant_values(types.SimpleNamespace(FORGET_BIAS=10**5000), LSTM_CONTRACT) == {}  # JSON would refuse it
    assert constant_values(types.SimpleNamespace(), LSTM_CONTRACT) == {}
    built = standin.build(LSTM_CONTRACT)
    standin.take_constants(built, {"FORGET_BIAS": 1.0, "lstm_cell": 3, "OTHER": 2}, LSTM_CONTRACT)
    assert built.FORGET_BIAS == 1.0 and callable(built.lstm_cell) and not hasattr(built, "OTHER")
    assert built.__all__ == ["lstm_cell", "LSTMCell", "LSTM", "FORGET_BIAS"]  # as the module's own
    fresh = standin.build(LSTM_CONTRACT)
    standin.take_constants(fresh, standin.connection_constants({"constants": {"FORGET_BIAS": [1.0]}}), LSTM_CONTRACT)
    assert not hasattr(fresh, "FORGET_BIAS")  # a list is not a plain value
    assert standin.connection_constants({"constants": "FORGET_BIAS=1"}) == {}


@pytest.mark.parametrize("text, expected", [
    ("X: float\n", "declares no public function and no Module class"),
    ("class Helper:\n    def forward(self): ...\n", "declares no public function and no Module class"),
    ("def broken(:\n", "line 1: the contract stub is not valid Python"),
    ("from tinyllm.nn.module import Module\ncell: float\nclass cell(Module): ...\n", "declares cell more than once"),
])
def test_a_stub_that_declares_nothing_to_serve_is_refused_naming_the_file(tmp_path, text, expected):
    stub = tmp_path / "thing.pyi"
    stub.write_text(text)
    with pytest.raises(ContractError, match=expected) as refused:
        read_contract(stub, "tinyllm.rnn.thing")
    assert str(stub) in str(refused.value)


def test_a_stubs_all_decides_what_is_public(tmp_path):
    stub = tmp_path / "m.pyi"
    stub.write_text('__all__ = ["Cell"]\nfrom tinyllm.nn.module import Module\n'
                    "def cell(x): ...\nclass Cell(Module): ...\nclass Other(Module): ...\n")
    assert read_contract(stub, "m") == Contract(module="m", functions=(), classes=("Cell",))


class ServedLSTM:
    """The LSTM reference served over a socket pair, a stand-in built from its stub connected
    to it, and the same module loaded in-process to compare with."""

    def __init__(self) -> None:
        source = LSTM.module_source.read_text()
        self.direct = load_implementation(source, LAYOUT.reference, "contract_direct_lstm")
        served = load_implementation(source, LAYOUT.reference, "contract_served_lstm")
        ours, theirs = socket.socketpair()
        self.fd, self._theirs = ours.detach(), theirs.detach()
        self.thread = threading.Thread(target=serve_implementation,
                                       args=(Connection(self._theirs), served, LSTM_CONTRACT), daemon=True)
        self.thread.start()
        standin.connect(Connection(self.fd))
        self.remote = standin.build(LSTM_CONTRACT)

    def close(self) -> None:
        os.close(self.fd)
        self.thread.join(timeout=5)
        os.close(self._theirs)


@pytest.fixture
def lstm():
    pair = ServedLSTM()
    yield pair
    pair.close()


def _cell(module, arrays):
    leaves = [Tensor(a, requires_grad=True) for a in arrays]
    h, c = module.lstm_cell(*leaves)
    ((h * h).sum() + (c * c * 0.5).sum()).backward()
    return h.data, c.data, [leaf.grad for leaf in leaves]


def test_lstm_cell_outputs_and_every_gradient_equal_the_lstms_own(lstm):
    rng = np.random.default_rng(0)
    batch, d_in, hidden = 2, 3, 4
    arrays = [rng.normal(size=(batch, d_in)), rng.normal(size=(batch, hidden)), rng.normal(size=(batch, hidden)),
              rng.normal(size=(4 * hidden, d_in)), rng.normal(size=(4 * hidden, hidden)),
              rng.normal(size=4 * hidden), rng.normal(size=4 * hidden)]
    want, got = _cell(lstm.direct, arrays), _cell(lstm.remote, arrays)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-12)
    for g, w in zip(got[2], want[2]):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("training", [False, True])
def test_a_stacked_lstm_with_dropout_and_lengths_matches_the_lstm(lstm, training):
    def run(module):
        layer = module.LSTM(3, 4, num_layers=2, dropout=0.3, rng=PCG32(5))
        layer.train(training)
        x = Tensor(np.random.default_rng(1).normal(size=(5, 3, 3)), requires_grad=True)
        out, (h_n, c_n) = layer(x, lengths=[5, 2, 4])
        (out.sum() + (h_n * c_n).sum()).backward()
        params = {name: p.data.copy() for name, p in layer.named_parameters()}
        return out.data, h_n.data, c_n.data, x.grad, params

    want, got = run(lstm.direct), run(lstm.remote)
    for w, g in zip(want[:4], got[:4]):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    assert list(got[4]) == list(want[4]) == [f"{kind}_l{k}" for k in range(2)
                                               for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    assert isinstance(getattr(lstm.remote.LSTM(3, 4), "weight_ih_l0"), Parameter)


@pytest.mark.parametrize("as_list", [False, True])
def test_a_state_pair_of_tensors_crosses_as_a_pair_and_its_gradients_come_back(lstm, as_list):
    """An LSTM's initial state ``(h0, c0)`` is a tuple of tensors: it crosses as a pair (a list
    as a list), each tensor a parent of the outputs, so gradients reach h0 and c0 as in-process."""
    def run(module):
        rng = np.random.default_rng(3)
        layer = module.LSTM(3, 4, num_layers=2, rng=PCG32(7))
        x = Tensor(rng.normal(size=(5, 2, 3)), requires_grad=True)
        h0 = Tensor(rng.normal(size=(2, 2, 4)), requires_grad=True)
        c0 = Tensor(rng.normal(size=(2, 2, 4)), requires_grad=True)
        out, (h_n, c_n) = layer(x, [h0, c0] if as_list else (h0, c0))
        cell_h, cell_c = module.LSTMCell(3, 4, rng=PCG32(8))(x[0], (h0[0], c0[0]))
        (out.sum() + (h_n * c_n).sum() + (cell_h * cell_c).sum()).backward()
        return out.data, h_n.data, c_n.data, cell_h.data, cell_c.data, x.grad, h0.grad, c0.grad

    want, got = run(lstm.direct), run(lstm.remote)
    for w, g in zip(want, got):
        assert g is not None
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("call", [
    lambda m: m.LSTM(3, 0),
    lambda m: m.LSTMCell(3, 4, rng="seed"),
    lambda m: m.lstm_cell("text", np.zeros((2, 4)), np.zeros((2, 4)), np.zeros((16, 3)), np.zeros((16, 4)),
                          np.zeros(16), np.zeros(16)),
])
def test_the_lstms_errors_cross_as_the_same_type_and_message(lstm, call):
    with pytest.raises(Exception) as want:
        call(lstm.direct)
    with pytest.raises(Exception) as got:
        call(lstm.remote)
    assert (type(got.value), str(got.value)) == (type(want.value), str(want.value))


def test_the_implementation_serves_nothing_its_contract_does_not_name(lstm):
    """A stand-in asking the LSTM's implementation for the GRU's function is refused: the
    contract, not the variant's module, says what may be called."""
    foreign = standin.build(Contract(module="tinyllm.rnn.gru", functions=("gru_cell",), classes=("GRU",)))
    with pytest.raises(Exception, match=r"a call must name one of \['lstm_cell'\], got 'gru_cell'"):
        foreign.gru_cell(np.zeros((1, 1)))
    with pytest.raises(Exception, match=r"a module's class must be one of \['LSTMCell', 'LSTM'\], got 'GRU'"):
        foreign.GRU(3, 4)
    h, c = lstm.remote.lstm_cell(*[np.zeros(s) for s in ((1, 2), (1, 3), (1, 3), (12, 2), (12, 3), (12,), (12,))])
    assert h.data.shape == c.data.shape == (1, 3)  # and it serves on


def test_a_variant_is_installed_under_its_contracts_module_and_file_name(monkeypatch, tmp_path):
    """The code compiled ahead (grader.run.codecache) and the module a run installs both take
    the file name from the contract: an LSTM variant is tinyllm/rnn/lstm.py, never gru.py."""
    import sys

    import tinyllm.rnn

    from grader.run import codecache
    from grader.worker.child import install_variant

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delitem(sys.modules, "tinyllm.rnn.lstm", raising=False)
    monkeypatch.delattr(tinyllm.rnn, "lstm", raising=False)
    source = LSTM.module_source.read_text()
    codecache.variant_code.cache_clear()
    code = codecache.variant_code(source, LSTM_CONTRACT.filename)
    codecache.variant_code.cache_clear()
    assert LSTM_CONTRACT.filename == "tinyllm/rnn/lstm.py"
    try:
        module = install_variant(source, code, LSTM_CONTRACT)
        assert sys.modules["tinyllm.rnn.lstm"] is module is tinyllm.rnn.lstm
        assert module.__file__ == "tinyllm/rnn/lstm.py" and module.lstm_cell.__code__.co_filename == "tinyllm/rnn/lstm.py"
        h, c = module.lstm_cell(*[np.zeros(s) for s in ((1, 2), (1, 3), (1, 3), (12, 2), (12, 3), (12,), (12,))])
        assert h.data.shape == (1, 3)
    finally:
        sys.modules.pop("tinyllm.rnn.lstm", None)
        if hasattr(tinyllm.rnn, "lstm"):
            delattr(tinyllm.rnn, "lstm")
