"""The cyclic garbage collector paused around work that makes many objects and no garbage
cycles: large imports (torch, Dynamo) and the loading of results files. Torch-free, for every
layer (the plugin pauses it before torch is imported)."""
from __future__ import annotations

import contextlib
import gc
from typing import Iterator

__all__ = ["gc_paused"]


@contextlib.contextmanager
def gc_paused(*, freeze: bool = False) -> Iterator[None]:
    """No cyclic garbage collection while the body runs (then as before).

    ``freeze``: collect the young generations first (garbage made before is freed, not kept),
    and move what is alive at the end out of the collector's sight for good (``gc.freeze``):
    for imports, whose hundreds of thousands of objects live as long as the process, so that
    neither the collections the import would trigger (tens of milliseconds each, several per
    import of torch or of Dynamo) nor any later one looks at them.
    """
    was = gc.isenabled()
    if freeze:
        gc.collect(1)
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if was:
            gc.enable()
