"""The pictures, drawn from plain data: ``matrix.png``'s heatmap (:func:`draw`), so that a build
over many rows can draw it in a process of its own while it writes the other reports, and the
stacked bars of the overview and the sensitivity charts (:func:`draw_bars`).

Imports numpy and matplotlib only.
"""
from __future__ import annotations

import numpy as np


def draw(spec: dict, path: str) -> None:
    """Draw the heatmap ``spec`` (made by ``reports.matrix.png_spec``) into ``path``.

    ``spec``: ``codes`` (matrix columns x entries, an index into ``palette``), ``palette`` (hex
    colours), ``row_labels`` (the matrix columns), ``group_starts`` / ``group_labels`` (a label
    above the first entry of each source and list), ``marks`` ((row, entry) of each failing
    cell; the first ``numbered`` get a number) and ``mark_labels`` (listed under the grid),
    ``legend`` (label, colour) pairs, ``title``, ``figsize`` (inches) and ``layout`` (inches:
    ``label_w``, ``group_h``, ``cell_w``, ``cell_h``, ``marks_h``).
    """
    # A bare Figure (no pyplot) renders with Agg and leaves the process's backend alone.
    import matplotlib

    # Unhinted glyphs: the labels are most of the drawing's cost, and FreeType's hinting about a
    # quarter of it, for no gain at this size.
    with matplotlib.rc_context({"text.hinting": "none"}):
        _draw(spec, path)


def _save(fig, path: str) -> None:
    """PNG bytes that depend on the drawing only: no software name, no date, fixed compression."""
    fig.savefig(path, format="png", metadata={"Software": None}, pil_kwargs={"compress_level": 3})


def _draw(spec: dict, path: str) -> None:
    from matplotlib.colors import to_rgba_array
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    codes = spec["codes"]
    n_rows, n_cols = codes.shape
    layout = spec["layout"]
    width, height = spec["figsize"]
    label_w, group_h, cell_w, cell_h = layout["label_w"], layout["group_h"], layout["cell_w"], layout["cell_h"]
    grid_w, grid_h = cell_w * max(n_cols, 1), cell_h * max(n_rows, 1)
    top = 0.5 + group_h
    fig = Figure(figsize=(width, height), dpi=100)
    ax = fig.add_axes((label_w / width, (height - top - grid_h) / height, grid_w / width, grid_h / height))
    # The colours are looked up here, cell by cell (matplotlib would colour-map the picture
    # after resampling it: every pixel).
    palette = (to_rgba_array(spec["palette"]) * 255).round().astype(np.uint8)
    ax.imshow(palette[codes], aspect="auto", interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks(range(n_rows), spec["row_labels"], fontsize=7)
    for tick in ax.get_yticklabels():
        tick.set_parse_math(False)
    if cell_w >= 0.05:  # white lines between cells where cells are wide enough to show them
        ax.vlines(np.arange(0.5, n_cols - 1), -0.5, n_rows - 0.5, colors="white", linewidth=0.4)
    ax.hlines(np.arange(0.5, n_rows - 1), -0.5, n_cols - 0.5, colors="white", linewidth=0.8)
    # Black lines between the groups, each labelled above its first entry.
    for start, label in zip(spec["group_starts"], spec["group_labels"]):
        if start:
            ax.axvline(start - 0.5, color="black", linewidth=1.0)
        ax.text(start - 0.5, -0.7, label, fontsize=6, rotation=90, va="bottom", ha="left",
                parse_math=False, clip_on=False)
    marks = spec["marks"]
    if marks:
        rows = np.array([r for r, _ in marks], dtype=float)
        cols = np.array([c for _, c in marks], dtype=float)
        ax.scatter(cols, rows, s=6, c="black", marker="x", linewidths=0.6)
        for k, (r, c) in enumerate(marks[: spec["numbered"]]):
            ax.annotate(str(k + 1), (c, r), xytext=(2, 2), textcoords="offset points", fontsize=6,
                        color="black", annotation_clip=False,
                        bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8})
    handles = [Patch(facecolor=colour, edgecolor="#555", label=label) for label, colour in spec["legend"]]
    below = (height - top - grid_h - 0.15) / height
    fig.legend(handles=handles, loc="upper left", fontsize=7, frameon=False, ncol=min(6, max(len(handles), 1)),
               bbox_to_anchor=(label_w / width, below))
    labels = spec["mark_labels"]
    half = (len(labels) + 1) // 2
    for k, column in enumerate((labels[:half], labels[half:])):
        if column:
            fig.text((0.1 + k * width / 2) / width, below - 0.75 / height, "\n".join(column), fontsize=6.5,
                     va="top", ha="left", parse_math=False, linespacing=1.3)
    fig.text(0.1 / width, 1.0 - 0.1 / height, spec["title"], fontsize=9, va="top", parse_math=False)
    _save(fig, path)


def draw_bars(spec: dict, path: str) -> None:
    """Stacked horizontal bars (``reports.overview`` and ``reports.sensitivity`` make the spec):
    ``rows`` (labels, top to bottom), ``segments`` ((label, colour, values per row), stacked
    left to right), ``notes`` (text right of each bar), ``title``, ``xlabel`` and ``share``
    (True: each bar is scaled to its row's total, so bars compare as fractions)."""
    import matplotlib

    with matplotlib.rc_context({"text.hinting": "none"}):
        _draw_bars(spec, path)


def _draw_bars(spec: dict, path: str) -> None:
    from matplotlib.figure import Figure

    rows = spec["rows"]
    n = max(len(rows), 1)
    label_w = 0.3 + max((len(r) for r in rows), default=8) * 0.065
    note_w = 0.3 + max((len(t) for t in spec["notes"]), default=4) * 0.065
    bar_w = 6.5
    width = label_w + bar_w + note_w
    height = 1.5 + 0.28 * n + 0.25 * ((len(spec["segments"]) + 3) // 4)
    fig = Figure(figsize=(round(width, 3), round(height, 3)), dpi=100)
    legend_h = 0.25 * ((len(spec["segments"]) + 3) // 4) + 0.5
    ax = fig.add_axes((label_w / width, legend_h / height, bar_w / width, (height - legend_h - 0.6) / height))
    totals = np.zeros(len(rows))
    for _, _, values in spec["segments"]:
        totals += np.asarray(values, dtype=float)
    scale = np.where(totals > 0, totals, 1.0) if spec.get("share") else np.ones(len(rows))
    left = np.zeros(len(rows))
    y = np.arange(len(rows))
    for label, colour, values in spec["segments"]:
        widths = np.asarray(values, dtype=float) / scale
        ax.barh(y, widths, left=left, color=colour, edgecolor="white", linewidth=0.3, label=label, height=0.75)
        left += widths
    ax.set_yticks(y, rows, fontsize=7)
    for tick in ax.get_yticklabels():
        tick.set_parse_math(False)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.0 if spec.get("share") else max(float(left.max()) if len(left) else 1.0, 1.0))
    ax.tick_params(axis="x", labelsize=7)
    ax.set_xlabel(spec["xlabel"], fontsize=8)
    for k, note in enumerate(spec["notes"]):
        ax.text(1.01, k, note, transform=ax.get_yaxis_transform(), fontsize=7, va="center", ha="left",
                parse_math=False, clip_on=False)
    fig.legend(loc="lower left", fontsize=7, frameon=False, ncol=4, bbox_to_anchor=(label_w / width, 0.0))
    fig.text(0.1 / width, 1.0 - 0.1 / height, spec["title"], fontsize=9, va="top", parse_math=False)
    _save(fig, path)


def main(argv: list[str]) -> None:
    """``main([SPEC, OUT])``: draw a pickled spec (written by a build into its own private
    temporary folder) into OUT; run by the build in a helper process (``reports.build._Helper``)."""
    import pickle

    spec_path, out = argv
    with open(spec_path, "rb") as f:
        spec = pickle.load(f)
    draw(spec, out)
