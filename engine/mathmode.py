"""Float32 math modes: what torch is set to, what that means per device, and putting it back.

A float32 matmul or convolution need not compute in float32: cuDNN runs float32 convolutions in
TF32 by default (``torch.backends.cudnn.allow_tf32`` is True), cuBLAS does so when asked, and
oneDNN on the CPU may use bfloat16. A comparison with another device must know which (a TF32
Conv3d differs from the CPU by ~4e-4), and a case that changes the setting must not leak it.

- :func:`capture`: every float32 / reduced-precision math setting this torch has, as a flat,
  JSON-safe dict with stable, readable keys (absent where this torch lacks the getter);
- :func:`restore`: write back what differs;
- :func:`float32_precision`: the effective precision (``ieee``, ``tf32``, ``bf16``) of float32
  ``matmul`` / ``conv`` / ``rnn`` operators on a device type;
- :func:`unit_roundoff`: the unit roundoff of such a precision;
- :func:`describe`: what a row or the run record shows for a device.

Everything is read and written through ``torch._C`` (as :mod:`engine.determinism` does), never
through ``torch.backends``: a broken or deprecated public API cannot interfere, flags frozen by
``torch.backends.disable_global_flags()`` do not block a restore, and nothing initialises CUDA.
Which getters exist is resolved once per process (a capture costs ~3 µs). Where the legacy and
the ``fp32_precision`` settings disagree (a mixed state: the new API alone was used), torch
refuses to report the legacy ones (a ``TORCH_CHECK`` in Context.cpp: RuntimeError, seen on 2.13):
the stored value is then read with the entries torch compares momentarily set to agree, and put
back. torch 2.9 (until pytorch/pytorch#166956) also warns once per process from C++ when a legacy
getter or setter first runs, ``torch._C`` included: that one warning is spent, silenced, when
the getters are resolved (``_Getters._spend_the_deprecation_warning``), so no capture or restore
warns.

Keys
----
Legacy settings (named after their ``torch.backends`` attribute):

==================================================== ==============================================
``cuda.matmul.allow_tf32``                           ``_get_cublas_allow_tf32``; None when torch refuses to
                                                     answer (the legacy and ``fp32_precision`` settings
                                                     disagree: torch raises). Derived, never written.
``float32_matmul_precision``                         ``_get_float32_matmul_precision`` (the stored value,
                                                     read with the matmul ``fp32_precision`` entries
                                                     momentarily neutral where torch refuses)
``cudnn.allow_tf32``                                 ``_get_cudnn_allow_tf32`` (likewise the stored flag)
``cuda.matmul.allow_fp16_reduced_precision_reduction`` ``_get_cublas_allow_fp16_reduced_precision_reduction``
(and ``..._split_k`` where torch returns a pair)
``cuda.matmul.allow_bf16_reduced_precision_reduction`` the same for bfloat16
``cuda.matmul.allow_fp16_accumulation``              ``_get_cublas_allow_fp16_accumulation``
``cuda.math_sdp.allow_fp16_bf16_reduction``          ``_get_math_sdp_allow_fp16_bf16_reduction``
``cpu.allow_fp16_reduced_precision_reduction``       ``_get_cpu_allow_fp16_reduced_precision_reduction``
``mkldnn.allow_tf32``                                ``_get_onednn_allow_tf32`` (oneDNN on Intel GPUs;
                                                     None where torch's getter gives None)
==================================================== ==============================================

``fp32_precision`` settings (releases that have ``torch._C._get_fp32_precision_getter(backend, op)``;
2.13 has, 2.5.1 has not),
keyed ``<backend>.<op>.fp32_precision``, ``<backend>.fp32_precision`` for op ``all`` and
``fp32_precision`` for the generic backend. The pairs are those torch's own Python code uses
(``torch/backends/__init__.py``: generic/all = ``torch.backends.fp32_precision``;
``torch/backends/cuda/__init__.py``: cuda/matmul = ``torch.backends.cuda.matmul.fp32_precision``;
``torch/backends/cudnn/__init__.py``: cuda/all = ``torch.backends.cudnn.fp32_precision``,
cuda/conv = ``torch.backends.cudnn.conv.fp32_precision``, cuda/rnn in releases that expose
``cudnn.rnn``; ``torch/backends/mkldnn/__init__.py``: mkldnn/all, mkldnn/matmul, mkldnn/conv,
mkldnn/rnn), plus cudnn/all|conv|rnn should a release name that backend; a pair this torch
rejects is left out. (The generic backend is only ever asked for ``all``: an older C++ map has
no other entry for it.) torch's getter *resolves* the value: an op set to ``none`` follows its
backend's ``all``, which follows the generic ``all`` (``Context::float32Precision`` in
aten/src/ATen/Context.cpp), so each value is the one torch's kernels read.

Rules of :func:`float32_precision` (sources: the installed torch's ``torch/backends/*`` Python
code and ``torch.set_float32_matmul_precision.__doc__``; aten/src/ATen/Context.cpp,
aten/src/ATen/cuda/CublasHandlePool.cpp and aten/src/ATen/native/mkldnn/Matmul.cpp of
pytorch/pytorch):

- ``fp32_precision`` first, as torch resolves it (op → backend ``all`` → generic ``all``; unset
  is ``none``, or ``default`` in early releases of the API). Where it names ``tf32`` / ``ieee`` /
  ``bf16`` that is the answer: the cuBLAS handle gets ``CUBLAS_TF32_TENSOR_OP_MATH`` exactly when
  ``float32Precision(CUDA, MATMUL) == TF32`` (CublasHandlePool.cpp), cuDNN convolutions and RNNs
  use TF32 when ``float32Precision(CUDA, CONV|RNN) == TF32`` (``Context::allowTF32CuDNN``). The
  CUDA backend has no bf16 (torch's getter turns an inherited ``bf16`` into ``none``): ``bf16``
  there counts as unset.
- Unset all the way up (or a torch without the API): the legacy settings decide.

  * **cuda, matmul**: ``tf32`` when ``cuda.matmul.allow_tf32`` is True or
    ``float32_matmul_precision`` is ``high`` or ``medium``, else ``ieee``. ``medium`` permits
    bfloat16 "if a fast matrix multiplication algorithm using that datatype internally is
    available", but on CUDA torch has none: "If 'high' or 'medium' are set then the TensorFloat32
    datatype will be used ... equivalent to setting torch.backends.cuda.matmul.allow_tf32 = True"
    (``set_float32_matmul_precision.__doc__``), ``allowTF32CuBLAS()`` is
    ``float32_matmul_precision != HIGHEST`` before the API and ``setFloat32MatmulPrecision("medium")``
    sets cuda/matmul to ``tf32`` with it (cuda rejects ``bf16``). So ``tf32``. (``high``'s other
    option, bfloat16x3, keeps ~16 mantissa bits: finer than TF32, so ``tf32`` bounds it.)
  * **cuda, conv / rnn**: ``tf32`` when ``cudnn.allow_tf32`` (torch's default: True), else ``ieee``.
  * **cpu**: oneDNN's ``mkldnn.<family>.fp32_precision`` where set (``bf16`` or ``tf32``; the
    latter is honoured only by hardware that has it: the coarser answer is given). Without the API,
    float32 matmuls take oneDNN's bf16 path when ``float32_matmul_precision`` is ``medium`` on a
    CPU with bf16 support (``use_mkldnn_bf32_matmul`` in Matmul.cpp), so ``medium`` gives ``bf16``
    for matmul (coarsest honest answer; hardware without bf16 computes ieee). Else ``ieee``.
  * **xpu** (oneDNN on Intel GPUs): as cpu, plus ``tf32`` where ``mkldnn.allow_tf32`` is True.
  * **any other device type**: ``<device>.<family>.fp32_precision`` / ``<device>.fp32_precision``
    if a settings dict carries them, else the generic ``fp32_precision`` where set (a vendor
    backend may honour it: the coarser answer), else ``ieee``.

- A mixed state (``fp32_precision`` unset but the legacy flag on, which torch refuses to report
  through the legacy getters) gives the coarser answer, ``tf32``.

Unit roundoff: float32 keeps 24 significand bits (2**-24), TF32 11 (10 stored: 2**-11), bfloat16
8 (7 stored: 2**-8).
"""
from __future__ import annotations

import functools
import warnings
from typing import Any, Callable

import torch

__all__ = ["FAMILIES", "PRECISIONS", "capture", "describe", "float32_precision", "restore", "unit_roundoff"]

#: Operator families whose float32 math a setting may reduce.
FAMILIES = ("matmul", "conv", "rnn")
#: Effective precisions, finest first.
PRECISIONS = ("ieee", "tf32", "bf16")
_ROUNDOFF = {"ieee": 2.0 ** -24, "tf32": 2.0 ** -11, "bf16": 2.0 ** -8}
#: What the fp32_precision API says for "not set here: follow the parent".
_UNSET = ("none", "default")

_C = torch._C

# (key, name of the torch._C getter, name of its setter); the setter is None for a derived value.
_LEGACY = (
    ("cuda.matmul.allow_tf32", "_get_cublas_allow_tf32", None),
    ("float32_matmul_precision", "_get_float32_matmul_precision", "_set_float32_matmul_precision"),
    ("cudnn.allow_tf32", "_get_cudnn_allow_tf32", "_set_cudnn_allow_tf32"),
)
# Plain flags: no check, no side effect. A getter returning a pair (allowed, split_k) is split.
_PLAIN = (
    ("cuda.matmul.allow_fp16_reduced_precision_reduction", "_get_cublas_allow_fp16_reduced_precision_reduction",
     "_set_cublas_allow_fp16_reduced_precision_reduction"),
    ("cuda.matmul.allow_bf16_reduced_precision_reduction", "_get_cublas_allow_bf16_reduced_precision_reduction",
     "_set_cublas_allow_bf16_reduced_precision_reduction"),
    ("cuda.matmul.allow_fp16_accumulation", "_get_cublas_allow_fp16_accumulation",
     "_set_cublas_allow_fp16_accumulation"),
    ("cuda.math_sdp.allow_fp16_bf16_reduction", "_get_math_sdp_allow_fp16_bf16_reduction",
     "_set_math_sdp_allow_fp16_bf16_reduction"),
    ("cpu.allow_fp16_reduced_precision_reduction", "_get_cpu_allow_fp16_reduced_precision_reduction",
     "_set_cpu_allow_fp16_reduced_precision_reduction"),
    ("mkldnn.allow_tf32", "_get_onednn_allow_tf32", "_set_onednn_allow_tf32"),
)
_SPLIT_K = "_split_k"
#: (backend, op) pairs of the fp32_precision API, parents before children.
_FP32_CANDIDATES = (
    ("generic", "all"),
    ("cuda", "all"), ("cuda", "matmul"), ("cuda", "conv"), ("cuda", "rnn"),
    ("cudnn", "all"), ("cudnn", "conv"), ("cudnn", "rnn"),
    ("mkldnn", "all"), ("mkldnn", "matmul"), ("mkldnn", "conv"), ("mkldnn", "rnn"),
)


def _fp32_key(backend: str, op: str) -> str:
    if backend == "generic":
        return "fp32_precision"
    return f"{backend}.fp32_precision" if op == "all" else f"{backend}.{op}.fp32_precision"


class _Slot:
    """One (backend, op) entry of the fp32_precision API."""

    __slots__ = ("key", "backend", "op", "parent", "get")

    def __init__(self, backend: str, op: str, getter: Callable[[str, str], str]) -> None:
        self.key = _fp32_key(backend, op)
        self.backend, self.op = backend, op
        self.parent = None if backend == "generic" else _fp32_key("generic", "all") if op == "all" \
            else _fp32_key(backend, "all")
        self.get = functools.partial(getter, backend, op)


class _Getters:
    """What this torch has, resolved once: the getters and setters, the fp32_precision pairs it
    accepts, and its word for "unset". ``gets`` reads every setting in the order of ``keys``
    (a getter that answers a pair gives two keys: ``pairs`` says where)."""

    def __init__(self) -> None:
        self.legacy = [(key, getattr(_C, get), getattr(_C, put) if put else None)
                       for key, get, put in _LEGACY if hasattr(_C, get) and (put is None or hasattr(_C, put))]
        # (key, getter, key of its split_k half where the getter answers a pair)
        self.plain: list[tuple[str, Callable[[], Any], str | None]] = []
        self.plain_setters: dict[str, Callable[..., None]] = {}
        for key, get, put in _PLAIN:
            if hasattr(_C, get) and hasattr(_C, put):
                pair = isinstance(getattr(_C, get)(), tuple)
                self.plain.append((key, getattr(_C, get), key + _SPLIT_K if pair else None))
                self.plain_setters[key] = getattr(_C, put)
        self.slots: list[_Slot] = []
        self.unset = "none"
        getter = getattr(_C, "_get_fp32_precision_getter", None)
        self.set_fp32 = getattr(_C, "_set_fp32_precision_setter", None)
        if getter is not None and self.set_fp32 is not None:
            accepted: set[tuple[str, str]] = set()
            for backend, op in _FP32_CANDIDATES:
                parent = ("generic", "all") if op == "all" else (backend, "all")
                if backend != "generic" and parent not in accepted:
                    continue  # no API (generic/all missing), or a backend this torch does not know
                try:
                    value = getter(backend, op)
                except (RuntimeError, ValueError, TypeError):
                    continue  # a pair this torch does not have
                if not isinstance(value, str):
                    continue
                if backend == "generic" and value in _UNSET:
                    self.unset = value
                accepted.add((backend, op))
                self.slots.append(_Slot(backend, op, getter))
        self.by_key = {s.key: s for s in self.slots}
        reads = ([(key, get, None) for key, get, _ in self.legacy] + self.plain
                 + [(s.key, s.get, None) for s in self.slots])
        self.read_keys = [key for key, _, _ in reads]
        self.gets = [get for _, get, _ in reads]
        self.keys = [k for key, _, split_k in reads for k in ((key,) if split_k is None else (key, split_k))]
        # where a pair is read, last first: splitting it shifts what follows
        self.pairs = [i for i in reversed(range(len(reads))) if reads[i][2] is not None]
        self._spend_the_deprecation_warning()

    def _spend_the_deprecation_warning(self) -> None:
        """torch 2.9 (until pytorch/pytorch#166956 removed it) warns from C++ the first time a
        legacy TF32 getter or setter runs, through ``torch._C`` too ("Please use the new API
        settings to control TF32 behavior ...": ``TORCH_WARN_ONCE`` in
        ``warn_deprecated_fp32_precision_api``, aten/src/ATen/Context.cpp). Spend that one warning
        here, silenced, so that it never surfaces inside a case (where the runner would take it
        for the op's) nor raises under ``-W error``. (It is the process's only one: the user's
        own legacy calls later warn no more.) A release without it warns nothing here either."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _, get, _ in self.legacy:
                try:
                    get()
                except RuntimeError:
                    pass  # a mixed state: torch refuses (after warning, where it warns)


@functools.lru_cache(maxsize=1)
def _getters() -> _Getters:
    return _Getters()


# ----------------------------------------------------------------------------- capture
def capture() -> dict[str, Any]:
    """Every float32 / reduced-precision math setting this torch has (keys in the module
    docstring, always in the same order; a setting this torch lacks is absent). Reads through
    ``torch._C`` only: no warning, no CUDA initialisation. About 3 µs: the guard of
    :mod:`engine.determinism` calls it several times per example."""
    g = _getters()
    return dict(zip(g.keys, _values(g)))


def _values(g: _Getters) -> list[Any]:
    """The settings' values in the order of ``g.keys``."""
    try:
        values = [get() for get in g.gets]
    except RuntimeError:  # a mixed state: a legacy getter refuses
        values = _values_one_by_one(g)
    for i in g.pairs:
        values[i:i + 1] = values[i]
    return values


def _values_one_by_one(g: _Getters) -> list[Any]:
    fp32 = {slot.key: slot.get() for slot in g.slots}
    values = []
    for key, get in zip(g.read_keys, g.gets):
        try:
            values.append(get())
        except RuntimeError:
            values.append(_stored_legacy(key, g, fp32))
    return values


def _stored_legacy(key: str, g: _Getters, fp32: dict[str, str]) -> Any:
    """A legacy getter refused (a mixed state: its value disagrees with ``fp32_precision``). The
    flag ``cuda.matmul.allow_tf32`` is derived: None. The two stored settings are read with the
    entries the check compares momentarily set so that it passes, then those entries are put back."""
    if key == "float32_matmul_precision":
        # The check fails only where cuda/matmul or mkldnn/matmul holds a reduced precision.
        neutral = [k for k in ("cuda.matmul.fp32_precision", "mkldnn.matmul.fp32_precision") if k in fp32]
        return _read_with(g, dict.fromkeys(neutral, "ieee"), fp32, _C._get_float32_matmul_precision)
    if key == "cudnn.allow_tf32":
        # The check passes when conv, rnn and the stored flag agree: with both entries tf32 it
        # answers True, or refuses, and then the flag is False.
        both = [k for k in ("cuda.conv.fp32_precision", "cuda.rnn.fp32_precision") if k in fp32]
        if len(both) != 2:
            return None
        return _read_with(g, dict.fromkeys(both, "tf32"), fp32, _C._get_cudnn_allow_tf32, refused=False)
    return None


def _read_with(g: _Getters, temporary: dict[str, str], fp32: dict[str, str], read: Callable[[], Any],
               refused: Any = None) -> Any:
    if not temporary or g.set_fp32 is None:
        return None
    try:
        for key, value in temporary.items():
            slot = g.by_key[key]
            g.set_fp32(slot.backend, slot.op, value)
        try:
            return read()
        except RuntimeError:
            return refused
    except (RuntimeError, ValueError):
        return None
    finally:
        for key in temporary:
            _write_slot(g, g.by_key[key], fp32)


def _write_slot(g: _Getters, slot: _Slot, saved: dict[str, Any]) -> None:
    """Give ``slot`` the resolved value ``saved`` has for it: "unset" where its parent resolves to
    that value already (the usual state: it follows), else the value itself."""
    value = saved[slot.key]
    if value in _UNSET or (slot.parent is not None and saved.get(slot.parent) == value):
        value = g.unset
    g.set_fp32(slot.backend, slot.op, value)


# ----------------------------------------------------------------------------- restore
def restore(saved: dict[str, Any]) -> None:
    """Write back every setting in ``saved`` (a :func:`capture`) that differs now, through
    ``torch._C`` setters (no warnings). Settings torch cannot report (None) are left alone."""
    if not saved:
        return
    g = _getters()
    values = _values(g)
    if list(saved.values()) == values and list(saved) == g.keys:
        return  # the usual case, checked without building a dict
    now = dict(zip(g.keys, values))
    if now == saved:
        return
    # The legacy setters write fp32_precision entries too (set_float32_matmul_precision sets
    # cuda/matmul and mkldnn/matmul; cudnn's allow_tf32 sets cuda/conv and cuda/rnn): first them,
    # then the entries, parents before children.
    for key, _, put in g.legacy:
        if put is None or saved.get(key) is None or key not in now:
            continue
        if now[key] != saved[key]:
            put(saved[key])
    for slot in g.slots:
        if slot.key in saved and slot.get() != saved[slot.key]:
            _write_slot(g, slot, saved)
    for key, _, split_k in g.plain:
        value = saved.get(key)
        if value is None or key not in now:
            continue
        put = g.plain_setters[key]
        if split_k is not None:
            if split_k in saved and (now[key], now[split_k]) != (value, saved[split_k]):
                put(value, saved[split_k])
        elif now[key] != value:
            put(value)


# ----------------------------------------------------------------------------- meaning
def _device_type(device_type: str) -> str:
    return str(device_type).split(":", 1)[0]


def _chain(settings: dict[str, Any], backend: str, family: str) -> str | None:
    """The fp32_precision a (backend, family) resolves to: op, then backend ``all``, then generic;
    None where nothing is set (or the settings have no such entries)."""
    for key in (f"{backend}.{family}.fp32_precision", f"{backend}.fp32_precision", "fp32_precision"):
        value = settings.get(key)
        if isinstance(value, str) and value not in _UNSET:
            return value
    return None


def float32_precision(device_type: str, family: str, settings: dict[str, Any] | None = None) -> str:
    """The effective precision (``ieee``, ``tf32`` or ``bf16``) of float32 ``family`` operators
    (``matmul``, ``conv`` or ``rnn``) on ``device_type`` (``cuda``, ``cpu``, any other; an index
    is ignored), under ``settings`` (a :func:`capture`; default: the settings now). The rules and
    their sources are in the module docstring."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    s = capture() if settings is None else settings
    device = _device_type(device_type)
    if device == "cuda":
        # cuDNN's entries are cuda/conv and cuda/rnn in torch's C++; "cudnn" only should a
        # release name that backend.
        backend = "cudnn" if family != "matmul" and "cudnn.fp32_precision" in s else "cuda"
        p = _chain(s, backend, family)
        if p in ("tf32", "ieee"):
            return p
        if family == "matmul":
            legacy = s.get("cuda.matmul.allow_tf32") is True or s.get("float32_matmul_precision") in ("high", "medium")
        else:
            legacy = s.get("cudnn.allow_tf32") is True
        return "tf32" if legacy else "ieee"
    if device in ("cpu", "xpu"):
        p = _chain(s, "mkldnn", family)
        if p in PRECISIONS:
            return p
        if device == "cpu" and family == "matmul" and s.get("float32_matmul_precision") == "medium":
            return "bf16"  # oneDNN's bf32 matmul (torch without the fp32_precision API, or a mixed state)
        if device == "xpu" and s.get("mkldnn.allow_tf32") is True:
            return "tf32"
        return "ieee"
    p = _chain(s, device, family)
    return p if p in PRECISIONS else "ieee"


def unit_roundoff(precision: str) -> float:
    """The unit roundoff of a float32 precision: ``ieee`` 2**-24, ``tf32`` 2**-11, ``bf16`` 2**-8."""
    try:
        return _ROUNDOFF[precision]
    except KeyError:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}") from None


#: The settings that decide a device type's precision (and, for cuda and cpu, the
#: reduced-precision reduction flags of its half types), in the order describe() shows them.
_DECIDING = {
    "cuda": ("cuda.matmul.allow_tf32", "float32_matmul_precision", "cudnn.allow_tf32", "fp32_precision",
             "cuda.fp32_precision", "cuda.matmul.fp32_precision", "cuda.conv.fp32_precision",
             "cuda.rnn.fp32_precision", "cudnn.fp32_precision", "cudnn.conv.fp32_precision",
             "cudnn.rnn.fp32_precision",
             "cuda.matmul.allow_fp16_reduced_precision_reduction",
             "cuda.matmul.allow_fp16_reduced_precision_reduction" + _SPLIT_K,
             "cuda.matmul.allow_bf16_reduced_precision_reduction",
             "cuda.matmul.allow_bf16_reduced_precision_reduction" + _SPLIT_K,
             "cuda.matmul.allow_fp16_accumulation", "cuda.math_sdp.allow_fp16_bf16_reduction"),
    "cpu": ("float32_matmul_precision", "fp32_precision", "mkldnn.fp32_precision", "mkldnn.matmul.fp32_precision",
            "mkldnn.conv.fp32_precision", "mkldnn.rnn.fp32_precision", "cpu.allow_fp16_reduced_precision_reduction"),
    "xpu": ("float32_matmul_precision", "mkldnn.allow_tf32", "fp32_precision", "mkldnn.fp32_precision",
            "mkldnn.matmul.fp32_precision", "mkldnn.conv.fp32_precision", "mkldnn.rnn.fp32_precision"),
}


def describe(device_type: str, *, settings: dict[str, Any] | None = None,
             precision: Callable[[str], str] | None = None) -> dict[str, Any]:
    """What a row or the run record shows for a device type: the effective float32 precision of
    each family, then ``settings``: the raw settings that decide it, in a fixed order (JSON-safe).
    ``precision``: a backend's own answer per family (``Backend.math_precision``), where it has one
    (None for a family where it raised)."""
    s = capture() if settings is None else settings
    device = _device_type(device_type)
    out: dict[str, Any] = {}
    for family in FAMILIES:
        if precision is None:
            out[family] = float32_precision(device, family, s)
            continue
        try:
            out[family] = str(precision(family))
        except Exception:  # noqa: BLE001 - a backend's broken answer is unknown, not a traceback
            out[family] = None
    keys = _DECIDING.get(device) or ("fp32_precision", *(k for k in s if k.startswith(f"{device}.")))
    out["settings"] = {k: s[k] for k in keys if k in s}
    return out
