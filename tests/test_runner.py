"""The runner compares bytes: NaN patterns, signed zeros, shapes and dtypes."""
import math
import struct

import pytest
import torch

from detconf.engine.program import Program
from detconf.engine.runner import as_bytes, compare_runs, flatten_tensors, observe


def nan_with_payload(payload: int) -> float:
    return struct.unpack("<f", struct.pack("<I", 0x7FC00000 | payload))[0]


def _constant(values):
    """A program that returns, on run i, ``values[i]`` (cycling)."""
    state = {"i": 0}

    def fn(x):
        out = values[state["i"] % len(values)].clone()
        state["i"] += 1
        return out

    return Program(fn=fn, inputs={"x": torch.zeros(1)})


def test_same_nan_bits_are_identical():
    t = torch.tensor([1.0, float("nan"), 3.0])
    obs = observe(_constant([t, t.clone()]), "error")
    assert obs.identical is True


def test_different_nan_payloads_differ():
    a = torch.tensor([nan_with_payload(1)], dtype=torch.float32)
    b = torch.tensor([nan_with_payload(2)], dtype=torch.float32)
    assert math.isnan(a.item()) and math.isnan(b.item())
    obs = observe(_constant([a, b]), "error")
    assert obs.identical is False
    assert "bytes differ" in obs.mismatch


def test_signed_zero_differs():
    obs = observe(_constant([torch.tensor([0.0]), torch.tensor([-0.0])]), "error")
    assert obs.identical is False


def test_shape_and_dtype_changes_differ():
    obs = observe(_constant([torch.zeros(2), torch.zeros(3)]), "error")
    assert obs.identical is False and "shape" in obs.mismatch
    obs = observe(_constant([torch.zeros(2), torch.zeros(2, dtype=torch.float64)]), "error")
    assert obs.identical is False


def test_max_abs_diff_reported():
    obs = observe(_constant([torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5])]), "error")
    assert obs.identical is False
    assert obs.max_abs_diff == pytest.approx(0.5)


def test_more_runs_catch_a_late_difference():
    t = torch.tensor([1.0])
    obs = observe(_constant([t, t, torch.tensor([2.0])]), "error", runs=3)
    assert obs.identical is False
    assert observe(_constant([t, t, torch.tensor([2.0])]), "error", runs=2).identical is True


def test_runs_below_two_rejected():
    with pytest.raises(ValueError, match="at least 2"):
        observe(_constant([torch.zeros(1)]), "error", runs=1)


def test_inputs_are_cloned_for_each_run():
    x = torch.zeros(3)
    prog = Program(fn=lambda x: x.add_(1), inputs={"x": x})
    obs = observe(prog, "error", runs=3)
    assert obs.identical is True
    assert torch.equal(x, torch.zeros(3)), "the recipe's input must stay untouched"


def test_gradients_are_compared():
    state = {"i": 0}

    def fn(x):
        state["i"] += 1
        return x * state["i"]  # same forward value for x == 0, gradient changes

    prog = Program(fn=fn, inputs={"x": torch.zeros(2)}, grad_inputs=("x",))
    obs = observe(prog, "error")
    assert obs.identical is False
    assert "grad[x]" in obs.mismatch


# torch 2.13 (not 2.5.1) warns that quantized tensors are deprecated: a UserWarning, once per
# process, in the harness tests' summary and not about them. The byte view of one is still checked.
@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")
def test_byte_views_of_special_tensors():
    c = torch.tensor([1 + 2j], dtype=torch.complex64)
    assert as_bytes(c).numel() == 8
    assert as_bytes(torch.tensor([True, False])).tolist() == [1, 0]
    q = torch.quantize_per_tensor(torch.tensor([0.5, 1.0]), 0.5, 0, torch.quint8)
    assert as_bytes(q).tolist() == [1, 2]
    s = torch.eye(2).to_sparse()
    assert torch.equal(as_bytes(s), as_bytes(torch.eye(2)))
    nc = torch.arange(6.0).reshape(2, 3).t()
    assert torch.equal(as_bytes(nc), as_bytes(nc.contiguous()))


@pytest.mark.parametrize("make", [
    lambda: torch.arange(12, dtype=torch.float32).reshape(3, 4),                   # contiguous: a view
    lambda: torch.arange(12, dtype=torch.float64).reshape(3, 4).t(),                # transposed: a copy
    lambda: torch.arange(12, dtype=torch.int16).reshape(3, 4)[:, ::2],              # strided
    lambda: torch.arange(5, dtype=torch.float16).expand(2, 5),                      # stride 0
    lambda: torch.tensor(3.5),                                                      # 0-d
    lambda: torch.arange(8.0).reshape(2, 4)[1:, 1:2],                               # one element, odd strides
    lambda: torch.empty(0, 3),                                                      # empty
    lambda: torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64).conj(),          # conj bit
    lambda: torch.arange(4.0).neg().reshape(2, 2)._neg_view() if hasattr(torch.Tensor, "_neg_view") else -torch.arange(4.0),
    lambda: torch.tensor([True, False, True]),
], ids=["contiguous", "transposed", "strided", "expanded", "0-d", "one-element", "empty", "conj", "neg", "bool"])
def test_byte_views_are_the_values_bytes_in_logical_order(make):
    t = make()
    expected = t.resolve_conj().resolve_neg().contiguous().numpy().tobytes()
    got = as_bytes(t)
    assert got.dtype == torch.uint8 and got.dim() == 1
    assert got.numpy().tobytes() == expected


def test_flatten_nested_outputs():
    labels = [label for label, _ in flatten_tensors({"b": (torch.zeros(1), [torch.ones(1)]), "a": torch.zeros(1), "n": 3})]
    assert labels == ["out[a]", "out[b][0]", "out[b][1][0]"]


def test_alert_error_and_warning_are_captured():
    def fn(x):
        return x.put_(torch.tensor([0]), torch.ones(1), accumulate=False)

    prog = Program(fn=fn, inputs={"x": torch.zeros(2)})
    err = observe(prog, "error")
    assert err.raised_runs == 2 and "does not have a deterministic implementation" in err.raised
    assert err.identical is None
    warn = observe(prog, "warn_only")
    assert warn.raised_runs == 0 and warn.warned_runs == 2 and warn.identical is True
    off = observe(prog, "off")
    assert off.raised_runs == 0 and off.warned_runs == 0


def test_other_errors_are_not_alerts():
    prog = Program(fn=lambda x: x.no_such_method(), inputs={"x": torch.zeros(1)})
    obs = observe(prog, "error")
    assert obs.error.startswith("AttributeError") and obs.raised is None
    prog = Program(fn=lambda x: (_ for _ in ()).throw(NotImplementedError("foo not implemented for 'Half'")),
                   inputs={"x": torch.zeros(1)})
    assert observe(prog, "error").unsupported


def test_float8_outputs_compare_within_tolerance():
    from detconf.engine.runner import compare_values

    a = [("out", torch.tensor([1.0, 2.0]).to(torch.float8_e4m3fn))]
    assert compare_values(a, a) is None
    b = [("out", torch.tensor([1.0, 4.0]).to(torch.float8_e4m3fn))]
    assert "max abs diff" in compare_values(a, b)


def test_cublas_alert_wording_counts_as_the_determinism_alert():
    from detconf.engine.runner import DETERMINISM_ALERT

    message = ("Deterministic behavior was enabled with either `torch.use_deterministic_algorithms(True)` or "
               "`at::Context::setDeterministicAlgorithms(true)`, but this operation is not deterministic because "
               "it uses CuBLAS and you have CUDA >= 10.2.")
    assert DETERMINISM_ALERT.search(message)
    assert not DETERMINISM_ALERT.search("expected scalar type Float but found Double")


def test_seeded_gradients_are_the_same_values_in_a_fresh_tensor_every_call():
    # Cached per shape (every run of an example feeds the same gradient), but never the cache
    # itself: a backward or an op may keep or change what it is handed.
    from detconf.engine.runner import _seeded_like

    out = torch.zeros(3, 4, dtype=torch.float64)
    first = _seeded_like(out, 1)
    second = _seeded_like(out, 1)
    assert first.dtype == torch.float64 and first.shape == (3, 4)  # the cache's own dtype: a copy all the same
    assert torch.equal(first, second) and first.data_ptr() != second.data_ptr()
    first.add_(100)
    assert torch.equal(_seeded_like(out, 1), second)
    assert not torch.equal(_seeded_like(out, 2), second)  # each output index has its own values
    c = _seeded_like(torch.zeros(2, dtype=torch.complex64), 0)
    assert c.dtype == torch.complex64 and bool((c.imag != 0).any())
