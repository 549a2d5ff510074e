"""Hypothesis strategies for tensors, shapes, dtypes and index tensors.

The strategies draw only the *small* parameters of an example (shape, dtype,
value range, duplicate share, a seed) and then build the tensor in one go from
a seeded ``torch.Generator`` on the CPU, moving it to the device afterwards.
Drawing 10^5 elements one by one would be slow and would give the shrinker
nothing useful to work on; with a seed the shrinker moves the shape towards
small, the dtype towards ``float32`` and the seed towards ``0``, so a failing
example reads as ``shape=(2, 3), dtype=torch.float32, seed=0``.

Every argument that says "value or strategy" accepts either a plain value or a
Hypothesis strategy producing such values. Options are keyword-only and are
checked when the strategy is built, with messages that name the argument.

Example sizes follow a module-level *scale* (:func:`set_scale`): ``"small"``
keeps CPU runs fast, ``"large"`` builds 10^5-10^6 element tensors for GPU runs,
where nondeterministic kernels (atomics, many threads writing one bin) show.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

__all__ = [
    "Scale",
    "SCALES",
    "DTYPE_CLASSES",
    "set_scale",
    "current_scale",
    "scale_limits",
    "set_threshold_limit",
    "threshold_limit",
    "threshold_sides",
    "seeds",
    "shapes",
    "float_dtypes",
    "tensors",
    "index_tensors",
    "build_tensor",
    "build_indices",
]

# ---------------------------------------------------------------------------
# Scale


@dataclass(frozen=True)
class Scale:
    """Default maxima the strategies use when a bound is not given.

    - ``name``: ``"small"``, ``"large"`` or ``"stress"``.
    - ``max_side``: longest side of a drawn shape.
    - ``max_numel``: most elements of a drawn shape.
    - ``max_indices``: most entries of a drawn index tensor.
    - ``max_bins``: most distinct targets an index tensor aims at by default
      (few bins and many indices make colliding writes likely).
    """

    name: str
    max_side: int
    max_numel: int
    max_indices: int
    max_bins: int


#: The stress tier's ceiling: elements of the largest tensor of an example (4 Mi).
STRESS_NUMEL = 1 << 22
#: The stress tier's floor, whatever the memory says (64 Ki).
STRESS_MIN_NUMEL = 1 << 16
#: Bytes of device memory the stress tier plans per element of an example's largest tensor: its
#: inputs, the runner's clones for every run, outputs, gradients and their byte views.
STRESS_BYTES_PER_ELEMENT = 256

SCALES: dict[str, Scale] = {
    "small": Scale("small", max_side=8, max_numel=512, max_indices=64, max_bins=16),
    "large": Scale("large", max_side=128, max_numel=1 << 20, max_indices=1 << 18, max_bins=1 << 12),
    # Built to make races visible (the stress tier, profile "stress"): the largest sizes the
    # device's memory allows (stress_scale), thousands of writes per destination (16 bins), and
    # every size drawn at the top of its range.
    "stress": Scale("stress", max_side=STRESS_NUMEL, max_numel=STRESS_NUMEL, max_indices=STRESS_NUMEL, max_bins=16),
}


def stress_scale(free_bytes: int | None) -> Scale:
    """The stress scale for a device with ``free_bytes`` free (None: unknown, the ceiling):
    :data:`STRESS_NUMEL` elements at most, fewer where :data:`STRESS_BYTES_PER_ELEMENT` per
    element would not fit, never fewer than :data:`STRESS_MIN_NUMEL`."""
    numel = STRESS_NUMEL if free_bytes is None else int(free_bytes) // STRESS_BYTES_PER_ELEMENT
    numel = max(STRESS_MIN_NUMEL, min(STRESS_NUMEL, numel))
    numel = 1 << (numel.bit_length() - 1)  # a power of two: the same sizes on devices of similar memory
    return Scale("stress", max_side=numel, max_numel=numel, max_indices=numel, max_bins=16)

_scale: str = "small"


def set_scale(name: str, limits: Scale | None = None) -> None:
    """Select the named scale (``"small"``, ``"large"`` or ``"stress"``) for later draws;
    ``limits`` replaces its maxima (the stress tier sized to a device: :func:`stress_scale`).

    Strategies read the scale when they draw, so a profile chosen after the
    strategies were built still applies.
    """
    global _scale
    if name not in SCALES:
        raise InvalidArgument(f"set_scale: name must be one of {sorted(SCALES)}, got {name!r}")
    if limits is not None:
        if limits.name != name:
            raise InvalidArgument(f"set_scale: limits are for scale {limits.name!r}, not {name!r}")
        SCALES[name] = limits
    _scale = name


def current_scale() -> str:
    """The name of the scale in force (``"small"`` unless :func:`set_scale` changed it)."""
    return _scale


def scale_limits(name: str | None = None) -> Scale:
    """The :class:`Scale` called ``name``, or the current one."""
    if name is None:
        name = _scale
    if name not in SCALES:
        raise InvalidArgument(f"scale_limits: name must be one of {sorted(SCALES)}, got {name!r}")
    return SCALES[name]


# ---------------------------------------------------------------------------
# Kernels' thresholds

#: The largest count (elements, indices) the perturbation tier puts at a threshold when the
#: device's memory is not known (64 Ki); the stress tier uses its own scale's maximum.
PERTURB_THRESHOLD_NUMEL = 1 << 16

_threshold_limit: int | None = None


def set_threshold_limit(limit: int | None) -> None:
    """Outside the stress tier, have recipes draw examples at their kernels' thresholds up to
    ``limit`` (the perturbation tier); None: the normal tier, no threshold examples."""
    if limit is not None:
        _check_int("limit", limit, min_value=1)
    global _threshold_limit
    _threshold_limit = limit


def threshold_limit() -> int | None:
    """The largest count a threshold example may hold: in the stress tier the stress scale's
    ``max_numel`` (sized to the device's memory), else what :func:`set_threshold_limit` set;
    None where examples are not drawn at thresholds (the normal tier)."""
    if _scale == "stress":
        return SCALES["stress"].max_numel
    return _threshold_limit


def threshold_sides(at: int) -> tuple[int, int]:
    """The counts just below and just above a kernel's switch at ``at``: ``at - 1`` and ``at + 1``
    take different paths whether the kernel tests ``n < at``, ``n <= at`` or ``n >= at``."""
    _check_int("at", at, min_value=2)
    return (at - 1, at + 1)


# ---------------------------------------------------------------------------
# Validation helpers


def _is_strategy(value: Any) -> bool:
    return isinstance(value, st.SearchStrategy)


def _as_strategy(value: Any) -> st.SearchStrategy:
    return value if _is_strategy(value) else st.just(value)


def _check_int(name: str, value: Any, *, min_value: int | None = None, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{name}={value!r} must be an integer, got {type(value).__name__}")
    if min_value is not None and value < min_value:
        raise InvalidArgument(f"{name}={value!r} must be at least {min_value}")


def _check_shape(name: str, shape: Any) -> tuple[int, ...]:
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if isinstance(shape, torch.Size):
        shape = tuple(shape)
    if not isinstance(shape, (tuple, list)):
        raise InvalidArgument(f"{name}={shape!r} must be a tuple of non-negative ints or a strategy for one")
    for side in shape:
        if isinstance(side, bool) or not isinstance(side, int) or side < 0:
            raise InvalidArgument(f"{name}={shape!r} must hold non-negative ints, got {side!r}")
    return tuple(shape)


def _check_dtype(name: str, dtype: Any) -> None:
    if not isinstance(dtype, torch.dtype):
        raise InvalidArgument(f"{name}={dtype!r} must be a torch.dtype or a strategy for one")
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool or _is_integer(dtype):
        return
    raise InvalidArgument(f"{name}={dtype!r} is not supported (quantized and other special dtypes are built by recipes)")


def _check_device(name: str, device: Any) -> torch.device:
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise InvalidArgument(f"{name}={device!r} is not a device: {exc}") from None


def _is_integer(dtype: torch.dtype) -> bool:
    return dtype in _INTEGER_DTYPES


# ---------------------------------------------------------------------------
# Seeds and shapes


#: The seeds :func:`seeds` draws (the recipe kit draws the same choice without the strategy).
SEED_RANGE = (0, 2**32 - 1)


def seeds() -> st.SearchStrategy[int]:
    """Seeds for ``torch.Generator.manual_seed``; they shrink towards ``0``."""
    return st.integers(min_value=SEED_RANGE[0], max_value=SEED_RANGE[1])


def shapes(
    *,
    min_dims: int = 1,
    max_dims: int = 3,
    min_side: int = 1,
    max_side: int | None = None,
    max_numel: int | None = None,
) -> st.SearchStrategy[tuple[int, ...]]:
    """Small, readable tensor shapes.

    - ``min_dims``: fewest dimensions (``0`` allows scalars).
    - ``max_dims``: most dimensions.
    - ``min_side``: shortest side (``0`` allows empty tensors).
    - ``max_side``: longest side; defaults to the current scale's ``max_side``.
    - ``max_numel``: most elements; defaults to the current scale's ``max_numel``.
      Sides are cut down from the last dimension until the shape fits.

    Shapes shrink towards ``min_dims`` dimensions of ``min_side``.
    """
    _check_int("min_dims", min_dims, min_value=0)
    _check_int("max_dims", max_dims, min_value=0)
    _check_int("min_side", min_side, min_value=0)
    _check_int("max_side", max_side, min_value=0, allow_none=True)
    _check_int("max_numel", max_numel, min_value=0, allow_none=True)
    if max_dims < min_dims:
        raise InvalidArgument(f"max_dims={max_dims} must be at least min_dims={min_dims}")
    if max_side is not None and max_side < min_side:
        raise InvalidArgument(f"max_side={max_side} must be at least min_side={min_side}")
    if max_numel is not None and min_dims and max_numel < min_side**min_dims:
        raise InvalidArgument(
            f"max_numel={max_numel} is below the smallest shape min_side**min_dims={min_side**min_dims}"
        )

    @st.composite
    def draw_shape(draw: Any) -> tuple[int, ...]:
        limits = scale_limits()
        side_cap = max(min_side, limits.max_side if max_side is None else max_side)
        numel_cap = limits.max_numel if max_numel is None else max_numel
        ndim = draw(st.integers(min_dims, max_dims))
        sides = [draw(st.integers(min_side, side_cap)) for _ in range(ndim)]
        # Fit within numel_cap by shortening the later sides first, keeping
        # the result deterministic in the drawn values (good for shrinking).
        for i in reversed(range(ndim)):
            if math.prod(sides) <= numel_cap:
                break
            rest = math.prod(sides[:i] + sides[i + 1 :]) or 1
            sides[i] = max(min_side, numel_cap // rest)
        return tuple(sides)

    return draw_shape()


# ---------------------------------------------------------------------------
# Dtypes

_FLOATING_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_COMPLEX_DTYPES = (torch.complex64, torch.complex128)
_INTEGER_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)

DTYPE_CLASSES: dict[str, tuple[torch.dtype, ...]] = {
    "floating": _FLOATING_DTYPES,
    "complex": _COMPLEX_DTYPES,
    "integer": _INTEGER_DTYPES,
    "bool": (torch.bool,),
}

_SUPPORT_CACHE: dict[tuple[str, torch.dtype], bool] = {}


def device_supports(device: torch.device | str, dtype: torch.dtype) -> bool:
    """Can a tensor of ``dtype`` live on ``device``? (MPS has no float64.)"""
    device = torch.device(device)
    key = (device.type, dtype)
    if key not in _SUPPORT_CACHE:
        if device.type == "cpu":
            ok = True
        else:
            try:
                torch.zeros(1, dtype=dtype, device=device)
                ok = True
            except (RuntimeError, TypeError):
                ok = False
        _SUPPORT_CACHE[key] = ok
    return _SUPPORT_CACHE[key]


def float_dtypes(
    classes: Sequence[str] | str = ("floating",),
    *,
    device: torch.device | str = "cpu",
    exclude: Iterable[torch.dtype] = (),
) -> st.SearchStrategy[torch.dtype]:
    """Dtypes of the given classes that ``device`` supports.

    - ``classes``: one or more of ``"floating"`` (float32, float64, float16,
      bfloat16), ``"complex"``, ``"integer"``, ``"bool"``. An empty sequence
      means ``("floating",)``, matching a sentence that names no dtype.
    - ``device``: dtypes the device cannot hold are left out.
    - ``exclude``: dtypes to leave out (an op without half support, say).

    The first dtype of the first class comes first, so shrinking lands on
    ``float32`` (or ``complex64``, ``int64``).
    """
    if isinstance(classes, str):
        classes = (classes,)
    if not isinstance(classes, (tuple, list)):
        raise InvalidArgument(f"classes={classes!r} must be a sequence of class names")
    unknown = [c for c in classes if c not in DTYPE_CLASSES]
    if unknown:
        raise InvalidArgument(f"classes={tuple(classes)!r}: unknown class(es) {unknown}, expected from {sorted(DTYPE_CLASSES)}")
    device = _check_device("device", device)
    excluded = set(exclude)
    for d in excluded:
        if not isinstance(d, torch.dtype):
            raise InvalidArgument(f"exclude={tuple(exclude)!r} must hold torch.dtype values, got {d!r}")
    chosen: list[torch.dtype] = []
    for cls in classes or ("floating",):
        for dtype in DTYPE_CLASSES[cls]:
            if dtype not in chosen and dtype not in excluded and device_supports(device, dtype):
                chosen.append(dtype)
    if not chosen:
        raise InvalidArgument(f"classes={tuple(classes)!r}: device {device} supports none of these dtypes")
    return st.sampled_from(chosen)


# ---------------------------------------------------------------------------
# Tensors


def build_tensor(
    shape: Sequence[int],
    dtype: torch.dtype,
    seed: int,
    *,
    device: torch.device | str = "cpu",
    low: float = -10,
    high: float = 10,
    contiguous: bool = True,
) -> torch.Tensor:
    """The tensor that :func:`tensors` builds from these drawn parameters.

    Values are uniform in ``[low, high)`` (integers in ``[low, high]``; bools
    fair coin flips), generated on the CPU from ``seed`` and then moved to
    ``device``. Half and bfloat16 values are generated as float32 and cast.
    With ``contiguous=False`` the result is a view with the same shape and
    values layout but non-contiguous strides: the transpose of a contiguous
    tensor of reversed shape (two or more dimensions) or every other element
    of a tensor twice as long (one dimension).
    """
    shape = tuple(shape)
    gen = torch.Generator().manual_seed(seed)
    if contiguous or len(shape) == 0:
        base_shape = shape
    elif len(shape) == 1:
        base_shape = (shape[0] * 2,)
    else:
        base_shape = shape[::-1]
    if dtype.is_complex:
        real_dtype = torch.float64 if dtype == torch.complex128 else torch.float32
        re = torch.rand(base_shape, generator=gen, dtype=real_dtype) * (high - low) + low
        im = torch.rand(base_shape, generator=gen, dtype=real_dtype) * (high - low) + low
        base = torch.complex(re, im).to(dtype)
    elif dtype.is_floating_point:
        gen_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        base = (torch.rand(base_shape, generator=gen, dtype=gen_dtype) * (high - low) + low).to(dtype)
    elif dtype == torch.bool:
        base = torch.randint(0, 2, base_shape, generator=gen).to(torch.bool)
    else:
        info = torch.iinfo(dtype)
        lo, hi = max(int(math.ceil(low)), info.min), min(int(math.floor(high)), info.max)
        base = torch.randint(lo, hi + 1, base_shape, generator=gen, dtype=torch.int64).to(dtype)
    base = base.to(device)
    if contiguous or len(shape) == 0:
        return base
    if len(shape) == 1:
        return base[::2]
    return base.permute(*reversed(range(len(shape))))


def tensors(
    *,
    shape: Any,
    dtype: Any = torch.float32,
    device: torch.device | str = "cpu",
    low: Any = -10,
    high: Any = 10,
    contiguous: Any = True,
) -> st.SearchStrategy[torch.Tensor]:
    """Tensors built from a seeded generator.

    - ``shape``: value or strategy; a tuple of non-negative ints (an int means
      a 1-D shape).
    - ``dtype``: value or strategy; a floating, complex, integer or bool
      ``torch.dtype``. float16/bfloat16 values are generated in float32, then cast.
    - ``device``: where the tensor ends up (built on the CPU, then moved).
    - ``low``: value or strategy; smallest value (real and imaginary parts alike).
    - ``high``: value or strategy; largest value, at least ``low``.
    - ``contiguous``: value or strategy; ``False`` gives a strided view (see
      :func:`build_tensor`); tensors with at most one element stay contiguous
      by torch's definition.

    The seed is drawn last and shrinks towards ``0``.
    """
    if not _is_strategy(shape):
        _check_shape("shape", shape)
    if not _is_strategy(dtype):
        _check_dtype("dtype", dtype)
    device = _check_device("device", device)
    for name, value in (("low", low), ("high", high)):
        if not _is_strategy(value) and (isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value)):
            raise InvalidArgument(f"{name}={value!r} must be a real number or a strategy for one")
    if not _is_strategy(low) and not _is_strategy(high) and high < low:
        raise InvalidArgument(f"high={high!r} must be at least low={low!r}")
    if not _is_strategy(contiguous) and not isinstance(contiguous, bool):
        raise InvalidArgument(f"contiguous={contiguous!r} must be a bool or a strategy for one")

    @st.composite
    def draw_tensor(draw: Any) -> torch.Tensor:
        s = _check_shape("shape", draw(_as_strategy(shape)))
        d = draw(_as_strategy(dtype))
        _check_dtype("dtype", d)
        lo, hi = draw(_as_strategy(low)), draw(_as_strategy(high))
        if hi < lo:
            raise InvalidArgument(f"high={hi!r} must be at least low={lo!r}")
        c = draw(_as_strategy(contiguous))
        seed = draw(seeds())
        return build_tensor(s, d, seed, device=device, low=lo, high=hi, contiguous=c)

    return draw_tensor()


# ---------------------------------------------------------------------------
# Index tensors

#: Default duplicate shares: readable values, shrinking towards "no duplicates".
DUPLICATE_SHARES = (0.0, 0.5, 0.9, 1.0)


def build_indices(
    shape: Sequence[int],
    size: int,
    seed: int,
    *,
    duplicates: float = 0.0,
    unique: bool = False,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.int64,
) -> torch.Tensor:
    """The index tensor that :func:`index_tensors` builds from drawn parameters.

    ``n = prod(shape)`` indices into ``[0, size)``. ``unique`` gives ``n``
    distinct values (``n <= size``). Otherwise ``k = max(1, round(n * (1 -
    duplicates)))`` distinct targets (at most ``size``) are chosen, each used
    at least once, and the other ``n - k`` entries repeat them at random, so a
    share of about ``duplicates`` of the entries are repeats.
    """
    shape = tuple(shape)
    n = math.prod(shape)
    gen = torch.Generator().manual_seed(seed)
    if n == 0:
        return torch.zeros(shape, dtype=torch.int64).to(dtype=dtype, device=device)
    if size <= 0:
        raise InvalidArgument(f"size={size!r} must be positive when indices are wanted")
    if unique:
        if n > size:
            raise InvalidArgument(f"unique=True needs num_indices <= size, got {n} indices into size={size}")
        values = torch.randperm(size, generator=gen)[:n]
    else:
        distinct = min(size, max(1, round(n * (1.0 - duplicates))))
        targets = torch.randperm(size, generator=gen)[:distinct]
        picks = torch.cat([
            torch.arange(distinct),
            torch.randint(0, distinct, (n - distinct,), generator=gen),
        ])
        order = torch.randperm(n, generator=gen)
        values = targets[picks[order]]
    return values.reshape(shape).to(dtype=dtype, device=device)


def index_tensors(
    *,
    size: Any,
    num_indices: Any = None,
    shape: Any = None,
    duplicates: Any = None,
    unique: bool = False,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.int64,
) -> st.SearchStrategy[torch.Tensor]:
    """Index tensors into ``[0, size)`` with a controllable share of duplicates.

    - ``size``: value or strategy; the length of the indexed dimension (>= 1).
    - ``num_indices``: value or strategy; how many indices (a 1-D result).
      Defaults to up to the current scale's ``max_indices``.
    - ``shape``: value or strategy; the index tensor's shape, instead of
      ``num_indices`` (for ``gather``/``scatter`` indices).
    - ``duplicates``: value or strategy; share in ``[0, 1]`` of entries that
      repeat another entry's target. ``1.0`` sends everything to one target
      (clamped up to the number of targets needed). Defaults to a draw from
      :data:`DUPLICATE_SHARES`. Many duplicates over few targets is what makes
      nondeterministic scatter/accumulate kernels disagree between runs.
    - ``unique``: all indices distinct (requires ``num_indices <= size``);
      excludes ``duplicates``.
    - ``device``: where the result ends up.
    - ``dtype``: ``torch.int64`` or ``torch.int32``.
    """
    if num_indices is not None and shape is not None:
        raise InvalidArgument("pass num_indices or shape, not both")
    if not _is_strategy(size):
        _check_int("size", size, min_value=1)
    if num_indices is not None and not _is_strategy(num_indices):
        _check_int("num_indices", num_indices, min_value=0)
    if shape is not None and not _is_strategy(shape):
        _check_shape("shape", shape)
    if not isinstance(unique, bool):
        raise InvalidArgument(f"unique={unique!r} must be a bool")
    if unique and duplicates is not None:
        raise InvalidArgument(f"unique=True excludes duplicates={duplicates!r}")
    if duplicates is not None and not _is_strategy(duplicates):
        if isinstance(duplicates, bool) or not isinstance(duplicates, (int, float)) or not 0 <= duplicates <= 1:
            raise InvalidArgument(f"duplicates={duplicates!r} must be a share between 0 and 1")
    if unique and not _is_strategy(size) and num_indices is not None and not _is_strategy(num_indices):
        if num_indices > size:
            raise InvalidArgument(f"unique=True needs num_indices <= size, got num_indices={num_indices}, size={size}")
    if unique and not _is_strategy(size) and shape is not None and not _is_strategy(shape):
        if math.prod(_check_shape("shape", shape)) > size:
            raise InvalidArgument(f"unique=True needs prod(shape) <= size, got shape={shape}, size={size}")
    device = _check_device("device", device)
    if dtype not in (torch.int64, torch.int32):
        raise InvalidArgument(f"dtype={dtype!r} must be torch.int64 or torch.int32")

    @st.composite
    def draw_indices(draw: Any) -> torch.Tensor:
        n_size = draw(_as_strategy(size))
        _check_int("size", n_size, min_value=1)
        if shape is not None:
            idx_shape = _check_shape("shape", draw(_as_strategy(shape)))
        else:
            cap = scale_limits().max_indices
            if unique:
                cap = min(cap, n_size)
            count = draw(st.integers(0, cap)) if num_indices is None else draw(_as_strategy(num_indices))
            _check_int("num_indices", count, min_value=0)
            idx_shape = (count,)
        share = 0.0
        if not unique:
            share = draw(st.sampled_from(DUPLICATE_SHARES) if duplicates is None else _as_strategy(duplicates))
            if not 0 <= share <= 1:
                raise InvalidArgument(f"duplicates={share!r} must be a share between 0 and 1")
        seed = draw(seeds())
        return build_indices(idx_shape, n_size, seed, duplicates=share, unique=unique, device=device, dtype=dtype)

    return draw_indices()
