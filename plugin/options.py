"""The suite's command-line options (``pytest_addoption``) and the defaults they fall back to."""
from __future__ import annotations

from pathlib import Path

import pytest

from detconf.vocabulary import DEFAULT_COMPILERS

#: The suite's root: the checkout, or the folder the packages are installed in (``pip install .``).
ROOT = Path(__file__).resolve().parent.parent
#: A checkout writes its results under its own reports/out/; an installed suite under the
#: folder pytest runs in.
DEFAULT_RESULTS = ((ROOT if (ROOT / "pytest.ini").is_file() else Path.cwd()) / "reports" / "out" / "results.jsonl")
#: The most runs per example ``--runs`` accepts. (Spelled as a power on purpose: Hypothesis
#: also draws the integer literals of 100 or more that it finds in the project's modules, so a
#: new such literal in a module loaded during a run changes the examples every case draws.)
MAX_RUNS = 10**3
#: The most ``--runs`` the stress tier accepts: each of its examples holds up to 4 Mi elements
#: and thousands of colliding writes, so a run costs seconds; 50 runs of one case are minutes.
STRESS_MAX_RUNS = 50

# Hypothesis (and torch) are imported only once the options have been checked, so that a
# usage error comes in well under a second.


def pytest_addoption(parser: pytest.Parser) -> None:
    from detconf.vocabulary import COMPILERS, MODES

    group = parser.getgroup("detconf", "detconf conformance suite")
    group.addoption("--device", action="append", default=None, metavar="NAME",
                    help="device type to test (repeatable): cpu, cuda, mps, npu or a PrivateUse1 name; "
                         "default: every available one")
    group.addoption("--mode", action="append", default=None, metavar="MODE",
                    help=f"{' | '.join(MODES)} (repeatable; default: error and warn_only)")
    group.addoption("--compile", action="append", default=None, choices=COMPILERS, metavar="SETTING",
                    dest="detconf_compile",
                    help="eager | aot_eager | inductor (repeatable; default: eager): run each case's program as "
                         "written or through torch.compile with that backend")
    group.addoption("--source", action="append", default=None, metavar="NAME",
                    help="catalog source (repeatable): torch-docs, ascend, vendor, flag-api, repro-notes, sdpa, "
                         "flex-attention, batch-invariance, sweep; default: all but the opt-in flex-attention, "
                         "batch-invariance and sweep")
    group.addoption("--doc-version", default=None, metavar="X.Y.Z",
                    help="judge the installed torch against this release's documented promises")
    group.addoption("--no-complements", action="store_true",
                    help="leave out the condition complements of torch-docs entries (list 'complement')")
    group.addoption("--results", default=str(DEFAULT_RESULTS), metavar="PATH",
                    help="JSON-lines results file (default: reports/out/results.jsonl); a run appends to it")
    group.addoption("--fresh-results", action="store_true",
                    help="empty the results file before this run instead of appending to it")
    group.addoption("--runs", default="2", metavar="N", help=f"runs per example (2 to {MAX_RUNS}; default 2)")
    group.addoption("--isolate", action="store_true",
                    help="judge every case in a fresh process (always on for backends that need it, e.g. npu)")
    group.addoption("--perturb", action="store_true",
                    help="the perturbation tier: judge each case in 2 fresh processes on the same examples and compare "
                         "them per example, with memory scribbled between runs, empty compile caches, distorted "
                         "benchmarking and a competing GPU load (docs/perturbation.md)")
    group.addoption("--no-report-build", action="store_true",
                    help="do not build the matrix (in <results file without suffix>-report/) at the end")
    group.addoption("--worker-memory", default=None, metavar="GIB",
                    help="memory one test worker needs on a device, in GiB (default: the backend's own figure); "
                         "-n is lowered to the number of workers the devices' free memory holds")
    group.addoption("--shard", default=None, metavar="I/N",
                    help="run only part I of N of the plan (a stable split by entry, device and compile "
                         "setting: N runners with 1/N ... N/N cover it once)")


def compilers(config: pytest.Config) -> list[str]:
    return list(dict.fromkeys(config.getoption("detconf_compile") or DEFAULT_COMPILERS))


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")
