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
    cell) with ``waived`` (per mark: a known finding waives it, drawn as a ring, else a cross),
    ``numbers`` ((entry, lane, number): an entry's number under the grid, lane -1: not drawn)
    and ``mark_labels`` (listed under the grid, in two columns where ``two_columns``),
    ``legend`` (label, colour) pairs, ``title``, ``figsize`` (inches) and ``layout`` (inches:
    ``label_w``, ``group_h``, ``cell_w``, ``cell_h``, ``marks_h``, ``numbers_h``, ``legend_h``).
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
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    codes = spec["codes"]
    n_rows, n_cols = codes.shape
    layout = spec["layout"]
    width, height = spec["figsize"]
    label_w, group_h, cell_w, cell_h = layout["label_w"], layout["group_h"], layout["cell_w"], layout["cell_h"]
    grid_w, grid_h = cell_w * max(n_cols, 1), cell_h * max(n_rows, 1)
    top = 0.55 + group_h
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
    waived = spec.get("waived") or [False] * len(marks)
    # A mark fits in its cell (72 points an inch), so neighbouring marks never overprint.
    size = (min(cell_w, cell_h) * 72 * 0.7) ** 2
    # Black marks, white ones on dark cells (WCAG's luminance of the cell's colour).
    rgb = palette[:, :3].astype(float) / 255
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    dark = (linear @ np.array([0.2126, 0.7152, 0.0722])) < 0.18
    for ring, marker in ((False, "x"), (True, "o")):
        chosen = [(r, c) for (r, c), w in zip(marks, waived) if w == ring]
        if chosen:
            colour = ["white" if dark[codes[r, c]] else "black" for r, c in chosen]
            style = {"facecolors": "none", "edgecolors": colour} if ring else {"c": colour}
            ax.scatter([c for _, c in chosen], [r for r, _ in chosen], s=size, marker=marker,
                       linewidths=max(0.3, min(0.8, cell_w * 8)), **style)
    # Entry numbers under the grid, one lane each where they would touch.
    for entry, lane, number in spec.get("numbers", []):
        if lane >= 0:
            ax.annotate(str(number), (entry, n_rows - 0.5), xytext=(0, -3 - 10 * lane), textcoords="offset points",
                        fontsize=6, ha="center", va="top", annotation_clip=False)
    numbers_h = layout.get("numbers_h", 0.0)
    handles = [Patch(facecolor=colour, edgecolor="#555", label=label) for label, colour in spec["legend"]]
    if not all(waived):
        handles.append(Line2D([], [], linestyle="none", marker="x", color="black", markersize=5, label="failing"))
    if any(waived):
        handles.append(Line2D([], [], linestyle="none", marker="o", markerfacecolor="none", color="black",
                              markersize=5, label="waived by a known finding"))
    below = (height - top - grid_h - numbers_h - 0.1) / height
    fig.legend(handles=handles, loc="upper left", fontsize=7, frameon=False, ncol=min(6, max(len(handles), 1)),
               bbox_to_anchor=(label_w / width, below))
    labels = spec["mark_labels"]
    columns = [labels[: (len(labels) + 1) // 2], labels[(len(labels) + 1) // 2:]] if spec.get("two_columns") else [labels]
    list_top = below - layout.get("legend_h", 0.6) / height
    for k, column in enumerate(columns):
        if column:
            fig.text((0.1 + k * width / 2) / width, list_top, "\n".join(column), fontsize=6.5,
                     va="top", ha="left", parse_math=False, linespacing=1.3)
    fig.text(0.1 / width, 1.0 - 0.08 / height, spec["title"], fontsize=8.5, va="top", parse_math=False,
             linespacing=1.4)
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
