"""Checks for the DataLoader recipe of the reproducibility notes (``--source repro-notes``).

"DataLoader will reseed workers following Randomness in multi-process data
loading algorithm. Use worker_init_fn() and generator to preserve
reproducibility", with ``seed_worker`` seeding NumPy and ``random`` from
``torch.initial_seed() % 2**32`` and a ``torch.Generator`` seeded with
``manual_seed(0)``. The dataset applies random "augmentations" from torch,
NumPy and ``random`` in the workers, so every source shows up in the batches.
"""
from __future__ import annotations

import random
from typing import Any

import numpy
import torch
from hypothesis import strategies as st
from torch.utils.data import DataLoader, Dataset

from detconf.engine.checks import CheckObservation, check

from detconf.engine.determinism import apply_mode as enter_mode
from detconf.engine.determinism import preserved_global_state

from ._support import REPRO_NOTES

NUM_WORKERS = 2
# fork: available on Linux, no re-import of the test process in the workers.
MP_CONTEXT = "fork"
LOADER_TIMEOUT_S = 60


class AugmentedDataset(Dataset):
    """Item ``i``: a fixed tensor plus noise from each random source of a worker."""

    def __init__(self, length: int, width: int) -> None:
        self.length = length
        self.width = width

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict[str, Any]:
        base = torch.full((self.width,), float(i))
        return {
            "index": i,
            "torch": base + torch.rand(self.width),
            "numpy": torch.from_numpy(numpy.random.rand(self.width)),
            "random": torch.tensor([random.random() for _ in range(self.width)]),
        }


def seed_worker(worker_id: int) -> None:
    """The notes' ``worker_init_fn``."""
    worker_seed = torch.initial_seed() % 2**32
    numpy.random.seed(worker_seed)
    random.seed(worker_seed)


def _epoch(dataset: Dataset, batch_size: int, *, seed: int | None, worker_init: bool) -> list[dict[str, Any]]:
    generator = None
    if seed is not None:
        generator = torch.Generator()
        generator.manual_seed(seed)
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=NUM_WORKERS,
        worker_init_fn=seed_worker if worker_init else None,
        generator=generator,
        multiprocessing_context=MP_CONTEXT,
        timeout=LOADER_TIMEOUT_S,
    )
    return list(loader)


def _differences(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[str]:
    """Which parts of the batches differ: order, and each random source."""
    if len(a) != len(b):
        return ["batch-count"]
    differing = []
    for key in ("index", "torch", "numpy", "random"):
        if any(not torch.equal(x[key], y[key]) for x, y in zip(a, b)):
            differing.append("order" if key == "index" else key)
    return differing


def _draw_loader(draw) -> tuple[AugmentedDataset, int, int]:
    length = draw(st.integers(4, 12), label="dataset length")
    width = draw(st.integers(1, 4), label="item width")
    batch_size = draw(st.integers(1, 4), label="batch size")
    seed = draw(st.integers(0, 2**32 - 1), label="generator seed")
    return AugmentedDataset(length, width), batch_size, seed


def _two_epochs(draw, mode: str, *, with_generator: bool, worker_init: bool) -> tuple[list[str], dict[str, Any]]:
    dataset, batch_size, seed = _draw_loader(draw)
    with preserved_global_state(rng=True):
        enter_mode(mode)
        first = _epoch(dataset, batch_size, seed=seed if with_generator else None, worker_init=worker_init)
        second = _epoch(dataset, batch_size, seed=seed if with_generator else None, worker_init=worker_init)
    detail = {
        "length": len(dataset),
        "width": dataset.width,
        "batch_size": batch_size,
        "generator_seed": seed if with_generator else None,
        "worker_init_fn": "seed_worker" if worker_init else None,
        "num_workers": NUM_WORKERS,
        "multiprocessing_context": MP_CONTEXT,
        "first_order": [int(i) for batch in first for i in batch["index"]],
        "second_order": [int(i) for batch in second for i in batch["index"]],
    }
    return _differences(first, second), detail


def _observed(differing: list[str]) -> str:
    return "identical" if not differing else "differs:" + ",".join(differing)


@check("DataLoader(num_workers=2,worker_init_fn,generator)", source=REPRO_NOTES)
def loader_with_recipe_repeats(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    differing, detail = _two_epochs(draw, mode, with_generator=True, worker_init=True)
    return CheckObservation(held=not differing, observed=_observed(differing), detail={**detail, "differing": differing})


@check("DataLoader(num_workers=2,generator)", source=REPRO_NOTES)
def loader_with_generator_only(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    # Half the recipe: recorded, not judged.
    differing, detail = _two_epochs(draw, mode, with_generator=True, worker_init=False)
    return CheckObservation(held=None, observed=_observed(differing), detail={**detail, "differing": differing})


@check("DataLoader(num_workers=2)", source=REPRO_NOTES)
def loader_without_recipe(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    # Neither worker_init_fn nor generator: the notes promise nothing; record what differs.
    differing, detail = _two_epochs(draw, mode, with_generator=False, worker_init=False)
    return CheckObservation(held=None, observed=_observed(differing), detail={**detail, "differing": differing})
