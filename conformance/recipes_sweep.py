"""The generic recipe of the undocumented-op sweep: run an OpInfo's own sample inputs.

One recipe serves every ``opinfo:<name>`` entry of ``conformance/sweep.py``.
For one example it

1. picks the dtype: ``float32``, or the OpInfo's first supported dtype on the
   device (in :data:`DTYPE_PREFERENCE` order) when ``float32`` is not one;
2. draws one small number (:data:`CHOICES`) that is the seed to generate the
   OpInfo's sample inputs under (torch's, Python's and NumPy's global
   generators are seeded, then restored), keeping the first
   :data:`MAX_SAMPLES` samples so that an example stays cheap;
3. runs the sample that number picks (its remainder modulo the sample count);
4. lifts every tensor out of the sample (input, positional and keyword
   arguments, nested lists / tuples / dicts of tensors) into the program's
   ``inputs``, so the runner hands the op fresh clones every run; a tensor the
   sample holds twice is one input, as the op saw it;
5. calls ``opinfo.op(input, *args, **kwargs)`` with the clones put back.

For backward entries (``supports_autograd``) the samples are generated with
``requires_grad=True`` when the dtype supports backward; the call goes through
the OpInfo's ``gradcheck_wrapper`` and the sample's ``output_process_fn_grad``
picks the outputs to differentiate, as torch's own gradient tests do. The full
forward output is compared as well, detached.

Random ops (:func:`conformance.sweep.is_random_op`) get the global generator
reseeded with :data:`RESEED` right before the call, so that the verdict is about
the algorithm, not about the random stream. Python values an op returns
(``item``, ``equal``, ``broadcast_shapes``) are compared as tensors.
"""
from __future__ import annotations

import itertools
import os
import random
from typing import Any

import torch
from hypothesis import strategies as st

from detconf.conformance import sweep
from detconf.engine import comparison
from detconf.engine.backends import HOST
from detconf.engine.determinism import preserved_python_rng
from detconf.engine.entry import Entry
from detconf.engine.program import NOT_JUDGED, Program, RecipeSkipped, recipe_prefix
from detconf.engine.runner import UNSUPPORTED, missing_kernel

# At most this many samples of an OpInfo are generated and considered per
# example (the first ones: generation is sequential). Override with
# DETCONF_SWEEP_SAMPLES.
MAX_SAMPLES = 8
# One drawn number ``choice`` in [0, max(CHOICES, samples kept)) picks both the seed the samples
# are generated under (``choice``) and the sample (``choice % len(samples)``).
# A single small draw keeps Hypothesis' shrinking of a failing case short
# (about 18 replays instead of about 180 for a 16-bit seed plus an index):
# failing cases dominate the sweep's time otherwise.
CHOICES = 16
RESEED = 20_240_917
DTYPE_PREFERENCE = (
    torch.float32, torch.float64, torch.complex64, torch.complex128, torch.float16, torch.bfloat16,
    torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
)


def max_samples() -> int:
    """:data:`MAX_SAMPLES`, or the positive integer in ``DETCONF_SWEEP_SAMPLES``."""
    raw = os.environ.get("DETCONF_SWEEP_SAMPLES", "").strip()
    if not raw:
        return MAX_SAMPLES
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"DETCONF_SWEEP_SAMPLES must be a positive integer, got {raw!r}")
    return int(raw)


_BY_NAME: dict[str, Any] | None = None


def find_opinfo(name: str) -> Any:
    global _BY_NAME
    if _BY_NAME is None:
        _BY_NAME = sweep.opinfo_by_name()
    try:
        return _BY_NAME[name]
    except KeyError:
        raise RecipeSkipped(f"torch {torch.__version__} has no OpInfo named {name!r}") from None


def device_restriction(opinfo: Any, device_type: str) -> str | None:
    """Why the OpInfo cannot run on ``device_type`` at all (torch's tests mark it
    ``onlyCUDA`` / ``onlyCPU`` / ``onlyOn``), or None."""
    try:
        from torch.testing._internal.common_device_type import onlyCPU, onlyCUDA, onlyOn
    except ImportError:
        return None
    for decorator in getattr(opinfo, "decorators", ()) or ():
        allowed: tuple[str, ...] = ()
        if decorator is onlyCUDA:
            allowed = ("cuda",)
        elif decorator is onlyCPU:
            allowed = ("cpu",)
        elif isinstance(decorator, onlyOn):
            wanted = decorator.device_type
            allowed = (wanted,) if isinstance(wanted, str) else tuple(wanted)
        if allowed and device_type not in allowed:
            return f"torch's OpInfo tests run {sweep.opinfo_name(opinfo)} on {', '.join(allowed)} only"
    return None


def pick_dtype(opinfo: Any, device_type: str) -> torch.dtype | None:
    """``float32`` if supported on ``device_type``, else the first supported in preference order."""
    supported = set(opinfo.supported_dtypes(device_type))
    if not supported:
        return None
    for dtype in DTYPE_PREFERENCE:
        if dtype in supported:
            return dtype
    return sorted(supported, key=str)[0]


def generate_samples(opinfo: Any, device: torch.device, dtype: torch.dtype, requires_grad: bool, seed: int,
                     limit: int) -> list:
    """The first ``limit`` sample inputs, generated with every global generator seeded with ``seed``.

    The generators' states are restored afterwards: an example leaves no trace
    in global state, and the same seed gives the same samples.
    """
    import numpy as np

    # On the CPU fork no device generator: an empty device list (device_type keeps its
    # default, which releases before 2.6 require to be a string). A device whose module cannot
    # save its generator (torch-opencl has no get_rng_state) is not forked either: its samples
    # come from the seeded CPU generator, and nothing on it is left to restore.
    module = getattr(torch, device.type, None)
    forkable = device.type != HOST and all(hasattr(module, f) for f in ("get_rng_state", "set_rng_state"))
    fork = {"devices": [device.index or 0], "device_type": device.type} if forkable else {"devices": []}
    with preserved_python_rng(), torch.random.fork_rng(**fork):
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed)
        # The sample function itself, which is what ``opinfo.sample_inputs(...,
        # set_seed=False)`` iterates: its wrapper reseeds with a fixed seed
        # unless told not to, and looks up the running unittest method
        # with inspect.stack() for every sample, which is slow under pytest.
        samples = opinfo.sample_inputs_func(opinfo, device, dtype, requires_grad)
        return list(itertools.islice(samples, limit))


# ---------------------------------------------------------------------------
# Lifting tensors out of a sample and putting clones back


_COMPRESSED = (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)
_FLOAT8 = tuple(getattr(torch, name) for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                                                  "float8_e5m2fnuz", "float8_e8m0fnu") if hasattr(torch, name))


class _Slot:
    """Where an input tensor goes back into the call: ``tensors[name]`` as it is."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def rebuild(self, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
        return tensors[self.name]

    def __repr__(self) -> str:
        return f"<{self.name}>"


class _ViewSlot(_Slot):
    """A view into an input that holds a whole storage: rebuilt with ``as_strided``,
    so offsets, gaps, zero strides and aliasing between arguments survive the
    runner's cloning (``as_strided`` samples read memory outside the view)."""

    __slots__ = ("size", "stride", "offset")

    def __init__(self, name: str, t: torch.Tensor) -> None:
        super().__init__(name)
        self.size, self.stride, self.offset = tuple(t.shape), tuple(t.stride()), t.storage_offset()

    def rebuild(self, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
        return tensors[self.name].as_strided(self.size, self.stride, self.offset)


class _SparseSlot(_Slot):
    """A compressed sparse tensor (CSR, CSC, BSR, BSC), lifted as its dense
    values: the runner clones and compares strided or COO tensors only."""

    __slots__ = ("layout", "blocksize", "dense_dim")

    def __init__(self, name: str, t: torch.Tensor) -> None:
        super().__init__(name)
        self.layout, self.dense_dim = t.layout, t.dense_dim()
        self.blocksize = None
        if t.layout in (torch.sparse_bsr, torch.sparse_bsc):
            self.blocksize = tuple(t.values().shape[1:3])

    def rebuild(self, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
        return tensors[self.name].to_sparse(layout=self.layout, blocksize=self.blocksize, dense_dim=self.dense_dim)


def _walk_tensors(value: Any):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _walk_tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _walk_tensors(item)


def _storage_key(t: torch.Tensor) -> tuple | None:
    if t.layout != torch.strided or t.is_quantized or t.is_conj() or t.is_neg() or t.device.type == "meta":
        return None
    try:
        storage = t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None
    if storage.nbytes() == 0 or storage.nbytes() % t.element_size():
        return None
    return (storage.data_ptr(), str(t.device), t.dtype)


class _Lifter:
    """Lifts the tensors out of a sample into named inputs, leaving a template.

    A tensor the sample holds twice is one input. A strided tensor that does
    not own exactly its storage (an offset, gaps, expanded, or sharing the
    storage with another argument) is lifted as its whole storage and rebuilt
    as the same view; a compressed sparse tensor is lifted dense.
    """

    def __init__(self, *values: Any) -> None:
        self.inputs: dict[str, torch.Tensor] = {}
        self.wants_grad: set[str] = set()
        self._by_id: dict[int, _Slot] = {}
        self._by_storage: dict[tuple, str] = {}
        sharers: dict[tuple, set[int]] = {}
        for t in (t for v in values for t in _walk_tensors(v)):
            key = _storage_key(t)
            if key is not None:
                sharers.setdefault(key, set()).add(id(t))
        self._shared = {key for key, ids in sharers.items() if len(ids) > 1}

    def _slot_for(self, t: torch.Tensor, where: str) -> _Slot:
        differentiable = t.requires_grad and (t.is_floating_point() or t.is_complex())
        key = _storage_key(t)
        if t.layout in _COMPRESSED:
            slot: _Slot = _SparseSlot(where, t)
            self.inputs[where] = t.detach().to_dense()
        elif key is not None and (key in self._shared or t.storage_offset() != 0
                                  or t.untyped_storage().nbytes() != t.numel() * t.element_size()):
            name = self._by_storage.get(key)
            if name is None:
                name = self._by_storage[key] = where
                storage = t.untyped_storage()
                whole = torch.empty(0, dtype=t.dtype, device=t.device)
                whole.set_(storage, 0, (storage.nbytes() // t.element_size(),), (1,))
                self.inputs[name] = whole
            slot = _ViewSlot(name, t)
        else:
            slot = _Slot(where)
            self.inputs[where] = t
        if differentiable:
            self.wants_grad.add(slot.name)
        return slot

    def lift(self, value: Any, where: str) -> tuple[Any, bool]:
        """(template, holds a tensor): ``value`` with each tensor replaced by a slot."""
        if isinstance(value, torch.Tensor):
            if id(value) not in self._by_id:
                self._by_id[id(value)] = self._slot_for(value, where)
            return self._by_id[id(value)], True
        if isinstance(value, dict):
            lifted = {k: self.lift(v, f"{where}[{k}]") for k, v in value.items()}
            if any(has for _, has in lifted.values()):
                return {k: t for k, (t, _) in lifted.items()}, True
            return value, False
        if isinstance(value, (list, tuple)):
            lifted_items = [self.lift(v, f"{where}[{i}]") for i, v in enumerate(value)]
            if not any(has for _, has in lifted_items):
                return value, False  # torch.Size, dims, shapes: keep the original object
            items = [t for t, _ in lifted_items]
            if isinstance(value, list):
                return items, True
            if hasattr(value, "_fields"):  # a namedtuple
                return type(value)(*items), True
            return tuple(items) if type(value) is tuple else type(value)(items), True
        return value, False


def _fill(template: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(template, _Slot):
        return template.rebuild(tensors)
    if isinstance(template, dict):
        return {k: _fill(v, tensors) for k, v in template.items()}
    if isinstance(template, list):
        return [_fill(v, tensors) for v in template]
    if isinstance(template, tuple) and any(isinstance(v, (_Slot, list, tuple, dict)) for v in template):
        items = [_fill(v, tensors) for v in template]
        if hasattr(template, "_fields"):
            return type(template)(*items)
        return tuple(items) if type(template) is tuple else type(template)(items)
    return template


def as_comparable(value: Any) -> Any:
    """Tensors as the runner can compare them (:func:`_plain_strides`); Python numbers, bools and ``torch.Size`` as tensors;
    containers recursively; anything else (``None``, strings, dtypes) dropped."""
    if isinstance(value, torch.Tensor):
        return _plain_strides(value)
    if isinstance(value, bool):
        return torch.tensor(value)
    if isinstance(value, (int, float, complex)):
        return torch.tensor(value)
    if isinstance(value, torch.Size):
        return torch.tensor(list(value), dtype=torch.int64)
    if isinstance(value, dict):
        converted = {k: as_comparable(v) for k, v in value.items()}
        return {k: v for k, v in converted.items() if v is not None}
    if isinstance(value, (list, tuple)):
        items = [as_comparable(v) for v in value]
        return [v for v in items if v is not None]
    try:  # NumPy scalars and arrays
        import numpy as np

        if isinstance(value, (np.generic, np.ndarray)):
            return torch.as_tensor(np.asarray(value))
    except ImportError:
        pass
    return None


def _contiguous_strides(shape: torch.Size) -> tuple[int, ...]:
    strides, step = [], 1
    for side in reversed(shape):
        strides.append(step)
        step *= max(side, 1)
    return tuple(reversed(strides))


def _plain_strides(t: torch.Tensor) -> torch.Tensor:
    """``t``, or a copy the runner can view as bytes, with the same values.

    Ops may return tensors that count as contiguous but carry odd strides on
    size-1 dimensions (``block_diag``), and gradients may too; a byte view of
    those fails, so they get row-major strides. Compressed sparse results
    (CSR, BSR...) become dense, ZeroTensors ordinary zeros, float8 results
    float32. The copies are differentiable.
    """
    if t.layout in _COMPRESSED:
        return t.to_dense()
    if t._is_zerotensor():  # a ZeroTensor gradient has no storage to view as bytes
        return t.clone(memory_format=torch.contiguous_format)
    if t.dtype in _FLOAT8:
        return t.to(torch.float32)  # exact; the runner's numeric checks lack float8 kernels
    if t.layout != torch.strided or t.is_quantized or t.stride() == _contiguous_strides(t.shape):
        return t
    return t.clone(memory_format=torch.contiguous_format)


def _plain_grad(grad: torch.Tensor | None) -> torch.Tensor | None:
    return None if grad is None else _plain_strides(grad)


def _detached(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_detached(v) for v in value]
    return value


def _differentiable(value: Any) -> bool:
    from detconf.engine.runner import flatten_tensors

    return any(t.requires_grad and (t.is_floating_point() or t.is_complex()) for _, t in flatten_tensors(value))


# ---------------------------------------------------------------------------
# Comparison rules of outputs that other devices may compute otherwise (engine.comparison)


def eigenvector_projectors(v: torch.Tensor) -> torch.Tensor:
    """The projector ``v_k v_k^H`` of each eigenvector (column ``k``): unique where the
    eigenvector is unique only up to sign (real) or phase (complex)."""
    return torch.einsum("...ik,...jk->...kij", v, v.conj())


_SIGN = ("eigenvectors are unique up to sign (phase): another device's solver may return the other one; "
         "compared through their projectors")
_SIGNED_GRADIENT = "the gradient of a sign-ambiguous output depends on the sign the solver chose"
_SAVED_STATS = ("the saved mean and inverse standard deviation of batch norm's eval mode are "
                "implementation-defined (CUDA returns them, the CPU empty tensors)")
#: Declared rules per OpInfo name (the sweep has no recipe of its own per op). Random ops get
#: theirs from their runs (engine.comparison.derive: the generator moved).
RULES: dict[str, tuple[comparison.Rule, ...]] = {
    "linalg.eigh": (comparison.invariant(eigenvector_projectors, _SIGN, outputs=("out[1]", "out[out][1]")),
                    comparison.runs_only(_SIGNED_GRADIENT, outputs=("out[grad_out]", "grad"))),
    "native_batch_norm": (comparison.runs_only(_SAVED_STATS, outputs=(
        "out[1]", "out[2]", "out[out][1]", "out[out][2]", "out[grad_out][1]", "out[grad_out][2]")),),
    "torch._scaled_mm": (comparison.runs_only("float8 scaled matmul: saturation, scaling and accumulation are "
                                              "implementation-defined per device"),),
}
RULES["_native_batch_norm_legit"] = RULES["native_batch_norm"]


# ---------------------------------------------------------------------------
# The recipe


@recipe_prefix(sweep.OP_PREFIX, targets=NOT_JUDGED)  # no sentence names a kernel: reach is not judged
def opinfo_sample(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """One sample input of the entry's OpInfo, run as ``opinfo.op(input, *args, **kwargs)``."""
    name = entry.op[len(sweep.OP_PREFIX):]
    opinfo = find_opinfo(name)
    device = torch.device(device)
    restriction = device_restriction(opinfo, device.type)
    if restriction:
        raise RecipeSkipped(restriction)
    dtype = pick_dtype(opinfo, device.type)
    if dtype is None:
        raise RecipeSkipped(f"OpInfo {name!r} lists no dtype for {device.type}")
    requires_grad = bool(entry.backward) and dtype in set(opinfo.supported_backward_dtypes(device.type))
    limit = max_samples()
    choice = draw(st.integers(0, max(CHOICES, limit) - 1))
    seed = choice
    try:
        samples = generate_samples(opinfo, device, dtype, requires_grad, seed, limit)
    except (RuntimeError, NotImplementedError, TypeError) as exc:
        if device.type != HOST and missing_kernel(str(exc), device.type):
            raise  # the device lacks an operator: the harness names it (unsupported), not a skip
        if UNSUPPORTED.search(str(exc)):
            raise RecipeSkipped(f"OpInfo {name!r}: its sample inputs cannot be built on {device.type}: "
                                f"{str(exc).splitlines()[0][:200]}") from None
        raise
    if not samples:
        raise RecipeSkipped(f"OpInfo {name!r} has no sample inputs for {dtype} on {device.type}")
    index = choice % len(samples)
    sample = samples[index]

    lifter = _Lifter(sample.input, sample.args, sample.kwargs)
    template = (
        lifter.lift(sample.input, "input")[0],
        lifter.lift(sample.args, "args")[0],
        lifter.lift(sample.kwargs, "kwargs")[0],
    )
    inputs = lifter.inputs
    grad_inputs = tuple(key for key in inputs if requires_grad and key in lifter.wants_grad)
    reseed = sweep.is_random_op(name)
    backward = bool(grad_inputs)
    op = opinfo.op
    wrapper = opinfo.gradcheck_wrapper
    process = sample.output_process_fn_grad

    def fn(**tensors: torch.Tensor) -> Any:
        for key in grad_inputs:
            # Gradients arrive with whatever strides backward produced; give
            # the runner row-major ones (see _plain_strides).
            tensors[key].register_hook(_plain_grad)
        the_input, args, kwargs = _fill(template, tensors)
        if reseed:
            torch.manual_seed(RESEED)
        if backward:
            out = wrapper(op, the_input, *args, **kwargs)
            grad_out = as_comparable(process(out))
            result = {"out": _detached(as_comparable(out)), "grad_out": grad_out}
            if not _differentiable(grad_out):
                # This sample's outputs do not depend differentiably on its
                # inputs (integer results, a constant): compare the forward
                # result only, and give the runner a trivial root to backward.
                result["grad_out"] = torch.zeros((), device=device, requires_grad=True)
            return result
        return as_comparable(op(the_input, *args, **kwargs))

    summary = sample.summary()
    describe = (f"OpInfo {name} sample {index}/{len(samples)} (seed {seed}, {dtype}, "
                f"{'backward' if backward else 'forward'}{', reseeded' if reseed else ''}): {summary}")
    if len(describe) > 600:
        describe = describe[:597] + "..."
    return Program(
        fn=fn,
        inputs=inputs,
        grad_inputs=grad_inputs,
        describe=describe,
        repro=_repro(opinfo, device, dtype, requires_grad, seed, limit, index, backward, reseed),
        meta={"opinfo": name, "sample_index": index, "samples": len(samples), "seed": seed,
              "dtype": str(dtype), "backward": backward, "reseeded": reseed,
              "uninitialized": name in sweep.UNINITIALIZED_OPS},
        compare=RULES.get(name, ()),
    )


def _repro(opinfo: Any, device: torch.device, dtype: torch.dtype, requires_grad: bool, seed: int, limit: int,
           index: int, backward: bool, reseed: bool) -> str:
    lines = [
        "import itertools, random",
        "import numpy",
        "from torch.testing._internal.common_methods_invocations import op_db",
        f"op = next(o for o in op_db if (o.name, o.variant_test_name) == ({opinfo.name!r}, {opinfo.variant_test_name!r}))",
        f"torch.manual_seed({seed}); random.seed({seed}); numpy.random.seed({seed})",
        f"samples = op.sample_inputs({str(device)!r}, {dtype}, requires_grad={requires_grad}, set_seed=False)",
        f"sample = list(itertools.islice(samples, {limit}))[{index}]",
    ]
    call = "op.gradcheck_wrapper(op.op, sample.input, *sample.args, **sample.kwargs)" if backward else \
        "op(sample.input, *sample.args, **sample.kwargs)"
    if reseed:
        lines.append(f"torch.manual_seed({RESEED})")
    lines.append(f"out = {call}  # run twice (inputs cloned) and compare bytes")
    return "\n".join(lines)
