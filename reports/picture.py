"""``matrix.png``: the heatmap, drawn from plain data (:func:`draw`), so that a build over many
rows can draw it in a process of its own while it writes the other reports.

Imports numpy and matplotlib only.
"""
from __future__ import annotations

import numpy as np


def draw(spec: dict, path: str) -> None:
    """Draw the heatmap ``spec`` (made by ``reports.matrix.png_spec``) into ``path``.

    ``spec``: ``codes`` (entries x columns, an index into ``palette``), ``palette`` (hex colours),
    ``labels`` (rows), ``column_labels``, ``group_starts`` / ``group_labels`` (a label at the first
    row of each source and list), ``legend`` (label, colour) pairs, ``title`` and ``cell_w`` (inches
    a column). Rows are 0.2 inch; label areas grow with the longest label.
    """
    # A bare Figure (no pyplot) renders with Agg and leaves the process's backend alone.
    import matplotlib

    # Unhinted glyphs: the labels are most of the drawing's cost, and FreeType's hinting about a
    # quarter of it, for no gain at this size.
    with matplotlib.rc_context({"text.hinting": "none"}):
        _draw(spec, path)


def _draw(spec: dict, path: str) -> None:
    from matplotlib.colors import to_rgba_array
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    codes = spec["codes"]
    labels, column_labels = spec["labels"], spec["column_labels"]
    group_starts, group_labels = spec["group_starts"], spec["group_labels"]
    cell_w = spec["cell_w"]
    n_rows, n_cols = codes.shape

    char = 0.075
    left = 0.3 + max((len(s) for s in labels), default=10) * char
    top = 0.6 + max((len(s) for s in column_labels), default=8) * char
    grid_w, grid_h = cell_w * max(n_cols, 1), 0.2 * max(n_rows, 1)
    groups_w = 0.3 + max((len(s) for s in group_labels), default=0) * char
    legend_w, legend_h = 2.8, 0.6 + 0.2 * spec["legend_slots"]
    width = left + grid_w + groups_w + legend_w
    height = max(top + grid_h + 0.3, top + legend_h)
    fig = Figure(figsize=(width, height), dpi=100)
    ax = fig.add_axes((left / width, (height - top - grid_h) / height, grid_w / width, grid_h / height))
    # The colours are looked up here, cell by cell (matplotlib would colour-map the picture
    # after resampling it: every pixel).
    palette = (to_rgba_array(spec["palette"]) * 255).round().astype(np.uint8)
    ax.imshow(palette[codes], aspect="auto", interpolation="nearest")
    ax.set_xticks(range(n_cols), column_labels, rotation=90, parse_math=False, fontsize=8)
    ax.xaxis.tick_top()
    # Row labels as plain texts: a tick per row costs several artists each.
    ax.set_yticks([])
    for i, label in enumerate(labels):
        ax.text(-0.5 - 0.05 / cell_w, i, label, fontsize=7, va="center", ha="right",
                parse_math=False, clip_on=False)
    # White lines between cells, black lines and a label at each (source, list) group.
    ax.vlines(np.arange(0.5, n_cols - 1), -0.5, n_rows - 0.5, colors="white", linewidth=0.6)
    ax.hlines(np.arange(0.5, n_rows - 1), -0.5, n_cols - 0.5, colors="white", linewidth=0.6)
    for start, label in zip(group_starts, group_labels):
        if start:
            ax.axhline(start - 0.5, color="black", linewidth=1.0)
        ax.text(n_cols - 0.5 + 0.15 / cell_w, start - 0.5, label, fontsize=7, va="top", ha="left",
                parse_math=False, clip_on=False)

    handles = [Patch(facecolor=colour, edgecolor="#555", label=label) for label, colour in spec["legend"]]
    fig.legend(handles=handles, loc="upper left", fontsize=8, frameon=False,
               bbox_to_anchor=((left + grid_w + groups_w) / width, 1.0 - top / height))
    fig.text(0.1 / width, 1.0 - 0.1 / height, spec["title"], fontsize=9, va="top", parse_math=False)
    fig.savefig(path, format="png", metadata={"Software": None}, pil_kwargs={"compress_level": 3})


def main(argv: list[str]) -> None:
    """``main([SPEC, OUT])``: draw a pickled spec (written by a build into its own private
    temporary folder) into OUT; run by the build in a helper process (``reports.build._Helper``)."""
    import pickle

    spec_path, out = argv
    with open(spec_path, "rb") as f:
        spec = pickle.load(f)
    draw(spec, out)
