"""Entries judged by checks rather than op recipes: the flag API and the
reproducibility notes.

``load_check_entries("flag-api")`` / ``load_check_entries("repro-notes")`` read
the catalog files in ``conformance/data/``; importing this package registers
one ``@check`` per entry (modules below). Where to find a check:

- ``flag_api``: use_deterministic_algorithms, the getters, set/get_deterministic_debug_mode
- ``uninitialized_memory``: fill_uninitialized_memory for empty, empty_like, empty_strided,
  new_empty, resize_
- ``seeds``: manual_seed (in process and across fresh processes), random.seed, np.random.seed
- ``dataloader``: DataLoader with and without worker_init_fn / generator
- ``cuda_env``: CUBLAS_WORKSPACE_CONFIG and cuDNN convolutions (CUDA only)
- ``inductor``: Inductor's deterministic setting and a torch.compile'd function
"""
from __future__ import annotations

from detconf.conformance.catalog import data_file, load_check_entries

from . import cuda_env, dataloader, flag_api, inductor, seeds, uninitialized_memory  # noqa: F401  (register checks)
from ._support import FLAG_API, REPRO_NOTES

__all__ = ["CATALOG_FILES", "CHECK_SOURCES", "load_check_entries"]

CHECK_SOURCES = (FLAG_API, REPRO_NOTES)
#: The shipped catalog files of the check sources.
CATALOG_FILES = {source: data_file(source) for source in CHECK_SOURCES}
