"""The plan: the cases of a run, from the options only (computed once per process), and one
generated test per case. Each test item carries its case (its ``conformance_case`` parameter):
the plugin reads the case from the item, never from the test's node id."""
from __future__ import annotations

import pytest

from detconf.vocabulary import DEFAULT_MODES, base_profile
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
    import torch

    from detconf.conformance.planned import suite_plan_for

    found = suite_plan_for(**plan_options(config), devices=[b.name for b in config._detconf_backends],
                           torch_version=str(torch.__version__))
    config._detconf_catalog_ids = found.catalog_ids
    config._detconf_plan_unsharded = found.unsharded
    cases = found.cases
    config._detconf_plan = cases
    config._detconf_case_by_id = {c.id: c for c in cases}
    return cases


def plan_options(config: pytest.Config) -> dict:
    """The options a plan comes from (but the devices): what :func:`case_plan` plans with and
    what the fresh process that plans them again (:func:`detconf.conformance.planned.suite_plan`) is given."""
    from detconf.vocabulary import DEFAULT_SOURCES

    shard = getattr(config, "_detconf_shard", None)
    return {"sources": list(config.getoption("--source") or DEFAULT_SOURCES),
            "modes": list(dict.fromkeys(config.getoption("--mode") or DEFAULT_MODES)),
            "compilers": compilers(config), "doc_version": config.getoption("--doc-version"),
            "complements": not config.getoption("--no-complements"), "shard": list(shard) if shard else None}


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
    from detconf.conformance.findings import load_facts

    lines = []
    # The facts' findings come first (conformance.findings.load_findings): a finding is named by its
    # place in known-findings.json, where a reader looks for it.
    offset = sum(len(fact.findings()) for fact in load_facts())
    for index, finding in enumerate(getattr(config, "_detconf_findings", None) or ()):
        if index < offset:
            continue  # a fact's cells: its entries are the facts' own (conformance/data/version-facts.json)
        if finding.source not in sources or (finding.source, finding.entry_id) in ids:
            continue
        if finding.source == "torch-docs" and (doc_version or config.getoption("--no-complements")):
            continue  # another release's docs, or complements left out: the catalog is not the whole list
        if not torch_in(str(torch.__version__), finding.torch):
            continue
        lines.append(f"warning: known finding #{index - offset} ({finding.source}: {finding.entry_id!r}, torch "
                     f"{finding.torch}) names no entry of the catalog: it waives nothing (a typo?)")
    return lines


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if CASE_PARAMETER in metafunc.fixturenames:
        from detconf.conformance.plan import control_first, heaviest_first

        cases = heaviest_first(case_plan(metafunc.config))  # an eager-only plan keeps its order
        profile = getattr(metafunc.config.option, "hypothesis_profile", None)
        if isinstance(profile, str) and base_profile(profile) == "stress":
            cases = control_first(cases)
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
