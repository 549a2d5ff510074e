"""Checks for the seeding recipe of the reproducibility notes (``--source repro-notes``).

"You can use torch.manual_seed() to seed the RNG for all devices (both CPU and
CUDA)"; "some PyTorch operations may use random numbers internally.
torch.svd_lowrank() does this, for instance"; "you can also get identical
results from an operation that uses random numbers by setting torch.manual_seed()
to the same value between subsequent calls". Python's ``random.seed`` and
NumPy's ``np.random.seed`` (and seeded NumPy ``Generator`` objects) are the
recipe for custom operators and other libraries.
"""
from __future__ import annotations


import random
from typing import Any

import torch
from hypothesis import strategies as st

from detconf.engine.checks import CheckObservation, CheckSkipped, check

from detconf.conformance import rng_ops as _rng_ops
from detconf.conformance.rng_ops import RNG_OPS
from detconf.child import child_env, finish_child, start_child
from detconf.engine.determinism import apply_mode as enter_mode
from detconf.engine.determinism import preserved_global_state
from detconf.engine.devices import backend_for

from ._support import REPRO_NOTES

_seeds = st.integers(0, 2**32 - 1)


def _float_dtype(draw, device: torch.device) -> str:
    return draw(st.sampled_from(["float32", "float64", "bfloat16"]), label="dtype")


def draw_params(draw, name: str, device: torch.device) -> dict[str, Any]:
    """Small parameters for one random op (JSON-safe: children get them too).

    Sizes are large enough that two unseeded runs almost never coincide (a
    dropout mask of 64+ elements, a permutation of 16+ items): an ignored seed
    must show as "differs" on the first example."""
    data_seed = draw(st.integers(0, 2**31 - 1), label="data seed")
    if name in ("randn", "rand"):
        shape = draw(st.lists(st.integers(1, 8), min_size=1, max_size=3), label="shape")
        return {"shape": shape, "dtype": _float_dtype(draw, device)}
    if name == "dropout":
        shape = draw(st.lists(st.integers(8, 16), min_size=2, max_size=3), label="shape")
        return {"shape": shape, "dtype": _float_dtype(draw, device), "p": draw(st.sampled_from([0.1, 0.5, 0.9]), label="p")}
    if name == "randperm":
        return {"n": draw(st.integers(16, 256), label="n")}
    if name == "multinomial":
        categories = draw(st.integers(8, 32), label="categories")
        replacement = draw(st.booleans(), label="replacement")
        samples = draw(st.integers(16, 64) if replacement else st.integers(8, categories), label="samples")
        return {"categories": categories, "samples": samples, "replacement": replacement, "data_seed": data_seed}
    if name == "svd_lowrank":
        # q below the rank: the result depends on the random projection, the
        # case where "calling it multiple times back-to-back ... may give different results".
        m = draw(st.integers(3, 10), label="m")
        n = draw(st.integers(3, 10), label="n")
        q = draw(st.integers(1, min(m, n) - 1), label="q")
        dtype = draw(st.sampled_from(["float32", "float64"]), label="dtype")
        return {"m": m, "n": n, "q": q, "dtype": dtype, "data_seed": data_seed}
    raise ValueError(f"unknown random op {name!r}")


def _informational(name: str, device: torch.device, mode: str) -> bool:
    # The notes promise repeatability once "all other sources of nondeterminism
    # have been eliminated": svd_lowrank's matmuls on CUDA are such a source
    # unless deterministic mode is on.
    return name == "svd_lowrank" and device.type == "cuda" and mode == "off"


def _is_cublas_config_error(exc: BaseException) -> bool:
    return "CUBLAS_WORKSPACE_CONFIG" in str(exc)


def _in_process_check(name: str):
    def seeded_twice(draw, entry, device: torch.device, mode: str) -> CheckObservation:
        seed = draw(_seeds, label="seed")
        params = draw_params(draw, name, device)
        with preserved_global_state(rng=True):
            enter_mode(mode)
            try:
                fn = _rng_ops.build(name, params, device)
                torch.manual_seed(seed)
                first = _rng_ops.fingerprint(fn())
                torch.manual_seed(seed)
                second = _rng_ops.fingerprint(fn())
                # Positive control, recorded only: another seed usually changes the output.
                torch.manual_seed((seed + 1) % 2**32)
                other = _rng_ops.fingerprint(fn())
            except RuntimeError as exc:
                if device.type == "cuda" and _is_cublas_config_error(exc):
                    raise CheckSkipped(
                        "CUBLAS_WORKSPACE_CONFIG is not :4096:8 or :16:8 in this process, which the notes "
                        "require for CUDA determinism"
                    ) from None
                raise
        same = first == second
        return CheckObservation(
            held=None if _informational(name, device, mode) else same,
            observed="repeats" if same else "differs",
            detail={
                "op": name,
                "seed": seed,
                "params": params,
                "first": first,
                "second": second,
                "other_seed_differs": other != first,
            },
        )

    seeded_twice.__name__ = f"manual_seed_{name}_repeats"
    return seeded_twice


for _name in RNG_OPS:
    check(f"manual_seed:{_name}", source=REPRO_NOTES)(_in_process_check(_name))


@check("manual_seed[fresh-processes]", source=REPRO_NOTES, max_examples=2)
def manual_seed_repeats_across_processes(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    # "...each time you run your application in the same environment": two fresh
    # interpreters run every random op after the same seeds and must agree.
    seed = draw(_seeds, label="seed")
    ops = {name: draw_params(draw, name, device) for name in RNG_OPS}
    payload = {
        "mode": mode,
        "seed": seed,
        "device": str(device),
        "ops": ops,
    }
    backend = backend_for(device.type)
    env = child_env(dict(backend.environment) if backend is not None and backend.environment else None)
    # The two children run side by side: one interpreter start-up of wall time.
    procs = [start_child("detconf.conformance.children:seeded_ops", payload, env=env) for _ in range(2)]
    results = [finish_child(p, timeout=180, what="manual_seed in a fresh process") for p in procs]
    differing = sorted(k for k in results[0] if results[0][k] != results[1].get(k))
    judged = [k for k in differing if not _informational(k, device, mode)]
    return CheckObservation(
        held=not judged,
        observed="repeats" if not differing else "differs:" + ",".join(differing),
        detail={"seed": seed, "ops": ops, "runs": results, "differing": differing},
    )


@check("random.seed", source=REPRO_NOTES)
def python_random_seed_repeats(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    seed = draw(st.one_of(st.integers(), st.text(max_size=8)), label="seed")
    k = draw(st.integers(1, 8), label="draws")

    def sample() -> list[Any]:
        items = list(range(8))
        random.shuffle(items)
        return [random.random() for _ in range(k)] + [random.randint(0, 1000)] + items

    with preserved_global_state(rng=True):
        enter_mode(mode)
        random.seed(seed)
        first = sample()
        random.seed(seed)
        second = sample()
    same = first == second
    return CheckObservation(
        held=same, observed="repeats" if same else "differs", detail={"seed": repr(seed), "first": repr(first[:4])}
    )


@check("np.random.seed", source=REPRO_NOTES)
def numpy_global_seed_repeats(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    import numpy as np

    seed = draw(_seeds, label="seed")
    k = draw(st.integers(1, 8), label="draws")

    def sample() -> bytes:
        return np.random.rand(k).tobytes() + np.random.randint(0, 1000, size=k).tobytes() + np.random.permutation(8).tobytes()

    with preserved_global_state(rng=True):
        enter_mode(mode)
        np.random.seed(seed)
        first = sample()
        np.random.seed(seed)
        second = sample()
    same = first == second
    return CheckObservation(held=same, observed="repeats" if same else "differs", detail={"seed": seed, "draws": k})


@check("np.random.default_rng(seed)", source=REPRO_NOTES)
def numpy_generator_objects_need_their_own_seed(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    # Generator objects "will need to be consistently seeded as well": seeded
    # ones repeat; unseeded ones ignore np.random.seed (recorded only).
    import numpy as np

    seed = draw(_seeds, label="seed")
    k = draw(st.integers(1, 8), label="draws")
    with preserved_global_state(rng=True):
        enter_mode(mode)
        first = np.random.default_rng(seed).random(k).tobytes()
        second = np.random.default_rng(seed).random(k).tobytes()
        np.random.seed(seed)
        unseeded_a = np.random.default_rng().random(k).tobytes()
        np.random.seed(seed)
        unseeded_b = np.random.default_rng().random(k).tobytes()
    same = first == second
    return CheckObservation(
        held=same,
        observed="repeats" if same else "differs",
        detail={"seed": seed, "draws": k, "unseeded_generators_repeat_after_np_random_seed": unseeded_a == unseeded_b},
    )
