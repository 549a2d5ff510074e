"""The README fits on a page and leads everywhere: every relative link (README and docs/) points
at a file (or a heading) that exists, every docs page is reachable from the README, every verdict
word is explained there, and every command-line option the pages name exists."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from detconf import vocabulary
from tests import warm

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a page's headings."""
    out = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def test_the_readme_fits_on_a_page():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 200


def broken_links(page: Path, text: str) -> list[str]:
    """The relative links of ``text`` (the contents of ``page``) that point at nothing."""
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists():
            broken.append(target)
        elif anchor and where.suffix == ".md" and anchor not in _anchors(where):
            broken.append(f"{target} (no such heading)")
    return broken


def unknown_options(text: str, known: set[str]) -> set[str]:
    return {o for o in re.findall(r"(?<![\w/-])--[a-z][a-z0-9-]*", text) if o not in known}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_points_at_something_that_exists(page):
    assert broken_links(page, page.read_text(encoding="utf-8")) == []


def test_the_checks_catch_a_broken_link_a_missing_heading_and_an_unknown_option():
    text = "[a](docs/nowhere.md) [b](docs/install.md#no-such-heading) [c](#two-commands) [d](https://x.org/y)"
    assert broken_links(README, text) == ["docs/nowhere.md", "docs/install.md#no-such-heading (no such heading)"]
    assert unknown_options("run with `--devise cuda` or --mode off", {"--mode"}) == {"--devise"}


def test_every_docs_page_is_reachable_from_the_readme():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in LINK.findall(README.read_text(encoding="utf-8"))}
    assert {p.resolve() for p in PAGES[1:]} <= linked, sorted(p.name for p in PAGES[1:] if p.resolve() not in linked)


def test_every_verdict_word_is_explained_in_the_readme():
    text = README.read_text(encoding="utf-8")
    for word, (_, meaning) in vocabulary.VERDICTS.items():
        row = next((line for line in text.splitlines() if line.startswith(f"| `{word}` |")), None)
        assert row is not None, word
        assert meaning.split(" (")[0] in row, (word, row)


#: Options of programs the pages show that are not this project's (each with what it belongs to).
FOREIGN = {
    "--index-url": "pip", "--system-site-packages": "python -m venv", "--without-pip": "python -m venv",
    "--headless": "chromium", "--no-sandbox": "chromium", "--disable-gpu": "chromium",
    "--always": "git describe", "--dirty": "git describe", "--porcelain": "git status",
    "--untracked-files": "git status", "--query-gpu": "nvidia-smi", "--format": "nvidia-smi",
    "--detach-sign": "gpg", "--armor": "gpg", "--subprocesses": "py-spy record", "--rate": "py-spy record",
}


def _known_options() -> set[str]:
    known = set(FOREIGN)
    helps = [[sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"],
             [sys.executable, "-m", "pip", "install", "--help"], [sys.executable, "-m", "pip", "download", "--help"]]
    for command in helps:
        out = warm.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
        known |= set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", out.stdout))
    for source in [*ROOT.glob("reports/*.py"), *ROOT.glob("detconf/*.py"), *ROOT.glob("benchmarks/*.py"),
                   *ROOT.glob("scripts/*.py"), *ROOT.glob("scripts/*.sh")]:
        text = source.read_text(encoding="utf-8")
        known |= set(re.findall(r"""["'](--[a-z][a-z0-9-]*)""", text))  # argparse's add_argument("--x")
        known |= set(re.findall(r"^\s*(--[a-z][a-z0-9-]*)(?:\|--[a-z][a-z0-9=*-]*)*\)", text, re.M))  # sh: --x)
    return known


def test_every_option_the_pages_name_exists():
    known = _known_options()
    unknown = {page.name: unknown_options(page.read_text(encoding="utf-8"), known) for page in PAGES}
    assert not any(unknown.values()), {name: found for name, found in unknown.items() if found}
