"""The plan: the cases of a run, from the options only (computed once per process), and one
generated test per case. Each test item carries its case (its ``conformance_case`` parameter):
the plugin reads the case from the item, never from the test's node id."""
from __future__ import annotations

import pytest

from detconf.vocabulary import DEFAULT_MODES
from detconf.plugin.options import compilers

#: The generated test (conformance/test_documented.py) and its parameter, the case.
CONFORMANCE_TEST = "test_documented"
CASE_PARAMETER = "conformance_case"
#: The node id an item had when it was collected: xdist's ``--dist loadgroup`` appends
#: ``@GROUP`` to the node id of a test with an ``xdist_group`` mark (compiled cases) on its
#: workers afterwards. Rows, the written set and the planned cases name a test as collected.
_COLLECTED_AS = pytest.StashKey[str]()


def case_plan(config: pytest.Config):
    """The sorted list of cases; computed once per process, from options only."""
    cached = getattr(config, "_detconf_plan", None)
    if cached is not None:
        return cached
    from detconf.conformance.catalog import load_catalog
    from detconf.conformance.plan import plan
    from detconf.vocabulary import DEFAULT_SOURCES

    sources = config.getoption("--source") or list(DEFAULT_SOURCES)
    modes = config.getoption("--mode") or list(DEFAULT_MODES)
    catalog = load_catalog(sources, doc_version=config.getoption("--doc-version"))
    if "torch-docs" in sources and not config.getoption("--no-complements"):
        from detconf.conformance.complements import complements

        catalog = catalog + complements(catalog)
    config._detconf_catalog_ids = {(e.source, e.id) for e in catalog}
    devices = [b.name for b in config._detconf_backends]
    chosen = compilers(config)
    compiles = None
    if any(c != "eager" for c in chosen):
        import detconf.conformance.registry  # noqa: F401  (the checks say which of them compile what they observe)
        from detconf.engine.checks import compiles as check_compiles

        def compiles(entry):
            return check_compiles(entry.source, entry.id)
    import torch

    # A promise limited to some releases (an entry's ``torch`` range) is planned as not
    # applicable to the torch under test: --doc-version's release, else the installed one.
    cases = plan(catalog, devices, list(dict.fromkeys(modes)), chosen, compiles=compiles,
                 torch_version=str(torch.__version__), doc_version=config.getoption("--doc-version"))
    config._detconf_plan_unsharded = len(cases)
    shard = getattr(config, "_detconf_shard", None)
    if shard is not None:
        from detconf.conformance.shard import select

        cases = select(cases, *shard)
    config._detconf_plan = cases
    config._detconf_case_by_id = {c.id: c for c in cases}
    return cases


def unknown_findings(config: pytest.Config) -> list[str]:
    """A warning line for each known finding that names an entry this run's catalog lacks, for
    a source, a torch and docs the run covers (a typo in the findings file: it waives nothing)."""
    import torch

    from detconf.findings_rule import torch_in
    from detconf.vocabulary import DEFAULT_SOURCES

    ids = getattr(config, "_detconf_catalog_ids", None)
    if ids is None:
        return []
    sources = set(config.getoption("--source") or DEFAULT_SOURCES)
    doc_version = config.getoption("--doc-version")
    lines = []
    for index, finding in enumerate(getattr(config, "_detconf_findings", None) or ()):
        if finding.source not in sources or (finding.source, finding.entry_id) in ids:
            continue
        if finding.source == "torch-docs" and (doc_version or config.getoption("--no-complements")):
            continue  # another release's docs, or complements left out: the catalog is not the whole list
        if not torch_in(str(torch.__version__), finding.torch):
            continue
        lines.append(f"warning: known finding #{index} ({finding.source}: {finding.entry_id!r}, torch "
                     f"{finding.torch}) names no entry of the catalog: it waives nothing (a typo?)")
    return lines


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if CASE_PARAMETER in metafunc.fixturenames:
        from detconf.conformance.plan import heaviest_first

        cases = heaviest_first(case_plan(metafunc.config))  # an eager-only plan keeps its order
        params = [pytest.param(c, marks=_compile_group(c), id=c.id) for c in cases]
        metafunc.parametrize(CASE_PARAMETER, params)


def _compile_group(case) -> tuple:
    """The modes of a compiled entry draw the same shape class (conformance.harness): kept on one
    xdist worker (``--dist loadgroup``), the second mode reuses the first one's kernels instead
    of compiling them again at the same time on another worker."""
    if case.compile == "eager":
        return ()
    name = f"{case.entry.source}:{case.entry.id}|{case.device}|{case.phase}|{case.compile}"
    # xdist reads the group after the last "@" only when no "]" follows it.
    return (pytest.mark.xdist_group(name.translate(str.maketrans("[]@", "<>_"))),)


def case_of(item: pytest.Item):
    """The case a generated test runs (the parameter it was given), or None for any other test
    (and for the one test pytest makes of an empty plan, whose parameter is no case)."""
    callspec = getattr(item, "callspec", None)
    case = callspec.params.get(CASE_PARAMETER) if callspec is not None else None
    planned = getattr(item.config, "_detconf_case_by_id", None) or {}
    return case if case is not None and planned.get(getattr(case, "id", None)) is case else None


def pytest_itemcollected(item: pytest.Item) -> None:
    item.stash[_COLLECTED_AS] = item.nodeid


def plain_nodeid(item: pytest.Item) -> str:
    """``item``'s node id as collected, without the ``@GROUP`` xdist may have added since."""
    return item.stash.get(_COLLECTED_AS, item.nodeid)


def cases_by_test_name(config: pytest.Config) -> dict:
    """The planned cases by the name of their test (``test_documented[<case id>]``), the name
    :func:`pytest_generate_tests` gives each: for the xdist controller, which holds no items and
    learns what its workers collected as node ids only."""
    return {f"{CONFORMANCE_TEST}[{case.id}]": case for case in case_plan(config)}
