"""Batch invariance: judged where Inductor's batch_invariant setting promises it, measured
elsewhere; a planted kernel whose rows depend on the batch size fails the promise while the
run-to-run determinism check passes it."""
import dataclasses
import json

import pytest
import torch
from hypothesis import settings

from detconf.conformance import batch_invariance as bi
from detconf.conformance.harness import judge
from detconf.conformance.plan import Case
from detconf.engine.devices import backends
from detconf.engine.program import Program, recipe
from tests.planted import planted_entry

TORCH = str(torch.__version__)
HAS_SETTING = hasattr(torch._inductor.config, "batch_invariant")
needs_setting = pytest.mark.skipif(not HAS_SETTING, reason="torch without Inductor's batch_invariant")


def rows_depend_on_batch(x):
    """Deterministic run to run; each row is scaled by the batch size, so a prefix differs."""
    return x * (1.0 + 1e-3 * x.shape[0])


@recipe("planted.rows_depend_on_batch", targets="aten.mul")
def _rows_depend_on_batch_recipe(draw, entry, case, device):
    return Program(fn=rows_depend_on_batch, inputs={"x": torch.randn(8, 3, device=device)},
                   describe="x * (1 + 1e-3 * batch)")


PLANTED = bi.BatchOp("planted", "planted.rows_depend_on_batch",
                     lambda ex, gen: (rows_depend_on_batch, {"x": bi._randn(gen, ex.batch, ex.width)}, {}))


def promise_covering(*ops):
    promise = bi.load_promise()
    return dataclasses.replace(promise, ops=promise.ops + ops)



@pytest.mark.parametrize("op_id", sorted(bi.OPS))
def test_every_tensor_a_program_uses_is_an_input_moved_to_the_device(op_id):
    """``observe`` moves the batched and fixed inputs to the case's device; a tensor a program
    closed over would stay on the CPU (on a GPU: "Expected all tensors to be on the same device",
    which the trace's CPU replay would then call a missing kernel). Planted (matmul's weight held
    in a closure again), this test fails."""
    gen = torch.Generator().manual_seed(0)
    fn, batched, fixed = bi.OPS[op_id].build(bi.Example(batch=4, k=2, width=8, seed=0), gen)
    held = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ())
            if isinstance(c.cell_contents, torch.Tensor)]
    assert held == [] and all(isinstance(t, torch.Tensor) for t in {**batched, **fixed}.values())
    moved = {name: t.to("meta") for name, t in {**batched, **fixed}.items()}
    assert fn(**moved) is not None  # every tensor it touches is on the device given

def test_the_verdict_is_judged_only_where_promised():
    assert bi.verdict_for(True, bi.Cell(judged=3, differing=1)) == "violated"
    assert bi.verdict_for(True, bi.Cell(judged=3, differing=0)) == "conforms"
    assert bi.verdict_for(False, bi.Cell(judged=3, differing=3)) == "recorded"
    assert bi.verdict_for(True, bi.Cell(judged=0)) == "unsupported"


def test_the_promise_covers_inductor_with_the_setting_on_from_2_13():
    promise = bi.load_promise()
    assert promise.setting == "torch._inductor.config.batch_invariant"
    assert set(promise.ops) == {"matmul", "bmm", "sum", "mean", "softmax", "layer_norm", "attention"}
    assert promise.holds_for("softmax", "inductor", "on", "2.13.0+cpu")
    assert not promise.holds_for("softmax", "inductor", "off", "2.13.0+cpu")
    assert not promise.holds_for("softmax", "eager", "on", "2.13.0+cpu")
    assert not promise.holds_for("softmax", "aot_eager", "on", "2.15.0")
    assert not promise.holds_for("softmax", "inductor", "on", "2.12.1")
    assert not promise.holds_for("planted", "inductor", "on", "2.13.0")  # not an op it covers


def test_the_installed_torch_has_the_setting_the_data_names():
    """The data says torch >= 2.13 has the setting with this text: check the installed torch."""
    import inspect

    import torch._inductor.config as config

    promise = bi.load_promise()
    assert promise.made_by(TORCH) == HAS_SETTING
    if HAS_SETTING:
        assert promise.text in inspect.getsource(config)


def test_a_torch_without_the_setting_skips_the_promised_cell_and_says_why():
    row = bi.judge_cell(bi.OPS["sum"], "cpu", "inductor", "on", bi.examples(1), promise=bi.load_promise(),
                        torch_version="2.12.0")
    assert row["verdict"] == "skipped"
    assert "has no torch._inductor.config.batch_invariant" in row["detail"]["reason"]


@needs_setting
def test_planted_batch_dependent_rows_fail_the_promise():
    promise = promise_covering("planted")
    row = bi.judge_cell(PLANTED, "cpu", "inductor", "on", bi.examples(2), promise=promise, torch_version=TORCH)
    assert row["verdict"] == "violated", row
    assert row["examples_differing"] == 2 and row["max_abs_diff"] > 0
    assert row["detail"]["first_difference"]["batch"] == 64
    assert bi.failing([row]) == [row]


@pytest.mark.parametrize("setting", bi.SETTINGS)
def test_planted_batch_dependent_rows_are_only_measured_in_eager(setting):
    promise = promise_covering("planted")
    row = bi.judge_cell(PLANTED, "cpu", "eager", setting, bi.examples(2), promise=promise, torch_version=TORCH)
    if setting == "on" and not promise.made_by(TORCH):  # a torch without the setting: nothing to turn on
        assert row["verdict"] == "skipped" and "has no" in row["detail"]["reason"]
        return
    assert row["verdict"] == "recorded" and row["examples_differing"] == 2
    assert bi.failing([row]) == []


def test_the_determinism_check_misses_the_planted_fault():
    """Run to run the planted kernel is bitwise stable: the ordinary check conforms."""
    case = Case(planted_entry("planted.rows_depend_on_batch", "deterministic"), "cpu", "error")
    row = judge(case, backends()["cpu"], hypothesis_settings=settings(max_examples=2, database=None, deadline=None))
    assert row["verdict"] == "conforms"


def test_an_invariant_op_conforms_and_the_eager_cell_is_recorded():
    promise = bi.load_promise()
    eager = bi.judge_cell(bi.OPS["softmax"], "cpu", "eager", "off", bi.examples(2), promise=promise, torch_version=TORCH)
    assert eager["verdict"] == "recorded" and eager["promise"] == "none" and eager["examples_judged"] == 2


def test_a_known_finding_covers_its_cells_only():
    promise = bi.load_promise()
    row = {"source": bi.SOURCE, "entry_id": "matmul", "device": "cpu", "compile": "inductor", "torch_version": "2.13.0+cpu"}
    assert promise.finding_for(row) is not None
    assert promise.finding_for({**row, "device": "cuda"}) is None
    assert promise.finding_for({**row, "torch_version": "2.12.0"}) is None
    assert bi.failing([{**row, "verdict": "violated", "detail": {}}])  # unwaived: fails


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["promise"]["ops"].append("cumsum"), "'cumsum' has no program"),
    (lambda d: d["promise"].update(torch="2.13"), "field 'torch' is '2.13'"),
    (lambda d: d["promise"].update(extra=1), "unknown field 'extra'"),
    (lambda d: d["findings"][0].update(why=" "), "field 'why' must be non-blank"),
])
def test_a_malformed_data_file_is_one_line(tmp_path, mutate, message):
    data = json.loads(bi.DATA_FILE.read_text())
    mutate(data)
    path = tmp_path / "bi.json"
    path.write_text(json.dumps(data))
    with pytest.raises(bi.BatchInvarianceError, match=message) as info:
        bi.load_promise(path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("argv, message", [
    (["--op", "cumsum"], "--op 'cumsum' is not known"),
    (["--examples", "0"], "--examples must be at least 1"),
    (["--compile", "tvm"], "invalid choice"),
    (["--device", "nodevice"], "--device 'nodevice' cannot be used here"),
])
def test_bad_options_are_one_line_and_status_2(argv, message, capsys, tmp_path):
    assert bi.main([*argv, "--results", str(tmp_path / "r.jsonl")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_the_command_writes_rows_as_they_come_and_the_table(tmp_path, capsys):
    results = tmp_path / "rows.jsonl"
    assert bi.main(["--op", "sum", "--compile", "eager", "--examples", "1", "--results", str(results),
                    "--out", str(tmp_path)]) == 0
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    on = "recorded" if bi.load_promise().made_by(TORCH) else "skipped"  # a torch without the setting skips "on"
    assert [(r["entry_id"], r["setting"], r["verdict"]) for r in rows] == [("sum", "off", "recorded"),
                                                                           ("sum", "on", on)]
    table = (tmp_path / "batch-invariance.md").read_text()
    assert "| " + " | ".join(bi.TABLE_COLUMNS) + " |" in table and "cpu: promised 0/0 held" in table
    assert (tmp_path / "batch-invariance.csv").read_text().splitlines()[0] == ",".join(bi.TABLE_COLUMNS)


def test_a_program_that_crashes_is_a_failing_row_not_a_traceback():
    def crash(ex, gen):
        def fn(x):
            raise RuntimeError("planted failure\nsecond line")

        return fn, {"x": bi._randn(gen, ex.batch, ex.width)}, {}

    row = bi.judge_cell(bi.BatchOp("crashes", "planted.crashes", crash), "cpu", "eager", "off", bi.examples(1),
                        promise=bi.load_promise(), torch_version=TORCH)
    assert row["verdict"] == "harness-error" and row["detail"]["error"] == "RuntimeError: planted failure second line"
    assert bi.failing([row]) == [row]


def test_bytes_are_compared_whatever_the_strides_of_a_size_one_dimension():
    """A one-element slice keeps the stride of its dimension (``contiguous()`` leaves it so) and a
    byte view of it was refused: its bytes are compared like any other tensor's, dtype and shape
    too."""
    odd = torch.empty_strided((1,), (2,), dtype=torch.float16).fill_(1.5)
    column = torch.arange(6, dtype=torch.float16).reshape(2, 3)[:1, 1:2]  # shape (1, 1), strides (3, 1)
    assert bi._bytes_equal(odd, torch.full((1,), 1.5, dtype=torch.float16))
    assert not bi._bytes_equal(odd, torch.full((1,), 2.5, dtype=torch.float16))
    assert bi._bytes_equal(column.t(), torch.ones(1, 1, dtype=torch.float16))  # strides (1, 3)
    assert not bi._bytes_equal(odd, torch.full((1,), 1.5, dtype=torch.float32))
    assert not bi._bytes_equal(odd, torch.full((1, 1), 1.5, dtype=torch.float16))
