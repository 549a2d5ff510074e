"""Outputs that are safe to open: spreadsheets, Markdown viewers and terminals.

Entry ids, sentences and messages come from docstrings, vendor lists and results files written
by anyone; they are data, never markup or commands.

- :func:`csv_cell`: a text cell a spreadsheet would read as a formula (it starts with ``=``, ``+``,
  ``-``, ``@``, a tab or a carriage return: the OWASP rule) gets a leading ``'``. Numbers are
  written as numbers.
- :func:`md_cell`: one line of Markdown table text, its punctuation backslash-escaped.
- :func:`terminal`: control characters (ANSI escapes included) replaced by ``?``.
- What every output shows as ``?`` (terminal, Markdown, HTML, CSV, the picture): the C0 and C1
  control characters and DEL (an ESC starts a terminal escape sequence, BEL rings) and the
  characters that change how the text around them reads without being seen: bidi embeddings,
  overrides, isolates and marks (``U+202E`` shows the rest of a line reversed), zero-width
  characters, line and paragraph separators -- Unicode's format characters (Cf), Zl and Zp.
  Newlines stay where a format has lines (terminal, files); a tab stays (CSV quotes what needs
  it); CSV keeps a carriage return in a quoted field (its own line breaks).
- :func:`markdown_table`, :func:`markdown_frame`: GitHub Markdown tables laid out the same on every
  machine (tabulate counts a wide character, such as the Ascend list's Chinese title, as two
  columns only where the optional ``wcwidth`` package is installed: here every character is one).
"""
from __future__ import annotations

import contextlib
import functools
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas only where a frame is made safe: the plugin's terminal lines need none of it
    import pandas as pd

__all__ = ["csv_arrow", "csv_cell", "csv_column", "csv_file_text", "csv_frame", "csv_table", "csv_text",
           "markdown_frame", "markdown_table", "md_cell", "md_frame", "narrow_characters", "one_line", "plain_text",
           "terminal", "unicode_text"]

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
# Characters with a meaning in GitHub Markdown (emphasis, code, links, raw HTML, table cells).
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~#])")
#: Code point ranges of the characters no output shows (see the module docstring): control
#: characters but tab and newline, then the format characters (Cf), Zl and Zp.
_HIDDEN_RANGES = (
    (0x00, 0x08), (0x0B, 0x1F), (0x7F, 0x9F), (0xAD, 0xAD), (0x600, 0x605), (0x61C, 0x61C), (0x6DD, 0x6DD),
    (0x70F, 0x70F), (0x890, 0x891), (0x8E2, 0x8E2), (0x180E, 0x180E), (0x200B, 0x200F), (0x2028, 0x202E),
    (0x2060, 0x2064), (0x2066, 0x206F), (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0x110BD, 0x110BD),
    (0x110CD, 0x110CD), (0x13430, 0x1343F), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
)


#: The same less the carriage return, which a CSV field keeps (quoted: one of its line breaks).
_CSV_HIDDEN_RANGES = tuple(r for r in _HIDDEN_RANGES if r != (0x0B, 0x1F)) + ((0x0B, 0x0C), (0x0E, 0x1F))


def _python_class(ranges) -> str:
    return "[" + "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in ranges) + "]"


def _re2_class(ranges) -> str:
    """The class in RE2's syntax (pyarrow's regular expressions), for a column at a time."""
    return "[" + "".join(f"\\x{{{lo:x}}}-\\x{{{hi:x}}}" for lo, hi in ranges) + "]"


_CONTROL = re.compile(_python_class(_HIDDEN_RANGES))
_CSV_CONTROL = re.compile(_python_class(_CSV_HIDDEN_RANGES))
_CSV_CONTROL_RE2 = _re2_class(_CSV_HIDDEN_RANGES)


def csv_cell(value: Any) -> Any:
    """A CSV cell: the characters no output shows (but tab, newline, carriage return) as ``?``,
    then a leading ``'`` where a spreadsheet would read a formula."""
    if isinstance(value, str):
        if _CSV_CONTROL.search(value):
            value = _CSV_CONTROL.sub("?", value)
        if value.startswith(_FORMULA_START) and not _NUMBER.fullmatch(value):
            return "'" + value
    return value


def csv_column(values: list) -> list:
    """A column of values for a CSV writer; untouched (the same list) when no cell needs it."""
    if any(isinstance(v, str) and (v.startswith(_FORMULA_START) or _CSV_CONTROL.search(v)) for v in values):
        return [csv_cell(v) for v in values]
    return values


def csv_text(value: Any) -> str:
    """One CSV field (see :func:`_csv_text`); a matrix repeats the same words thousands of times,
    so the text of each hashable value is made once."""
    try:
        return _csv_text_cached(value)
    except TypeError:  # an unhashable value
        return _csv_text(value)


def _csv_text(value: Any) -> str:
    """One CSV field: text neutralised (:func:`csv_cell`) and quoted where it holds a comma, a
    quote or a line break -- a carriage return too, where many readers end a row; numbers as
    ``str`` writes them; None and NaN empty."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    text = str(csv_cell(value))
    if any(c in text for c in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text


def csv_table(frame: pd.DataFrame) -> str:
    """``frame`` (header and rows, no index) as CSV text with :func:`csv_text` fields."""
    lines = [",".join(csv_text(c) for c in frame.columns)]
    lines += [",".join(map(csv_text, row)) for row in frame.astype(object).itertuples(index=False, name=None)]
    return "\n".join(lines) + "\n"


def csv_arrow(values):
    """A pyarrow string array with :func:`csv_cell` applied: the characters no output shows
    are replaced column-wise (looked for only where the bytes hold a control byte or a
    non-ASCII one), then cells whose first byte starts a formula are found column-wise (on the
    array's buffers) and passed through :func:`csv_cell` (the same rule, numbers excepted)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = _hide_arrow(values)
    suspect = _starts_with_any(values, _FORMULA_START_BYTES)
    if not suspect.any():
        return values
    mask = pa.array(suspect)
    fixed = pa.array([csv_cell(v) for v in values.filter(mask).to_pylist()], pa.string())
    return pc.replace_with_mask(values, mask, fixed)


_FORMULA_START_BYTES = frozenset(c.encode()[0] for c in _FORMULA_START)


def _hide_arrow(values):
    """A pyarrow string array with the characters of :data:`_CSV_CONTROL` as ``?``."""
    import numpy as np
    import pyarrow.compute as pc

    offsets, data = _string_parts(values)
    used = data[int(offsets[0]):int(offsets[-1])] if len(offsets) else data[:0]
    # A C0 control byte (but tab, newline, carriage return), DEL, or a byte of a non-ASCII
    # character (C1 controls and format characters are): only then is the pattern looked for.
    if not ((used >= 0x7F) | ((used < 0x20) & (used != 9) & (used != 10) & (used != 13))).any():
        return values
    if not np.asarray(pc.fill_null(pc.match_substring_regex(values, _CSV_CONTROL_RE2), False), dtype=bool).any():
        return values
    return pc.replace_substring_regex(values, _CSV_CONTROL_RE2, "?")


def _string_parts(values):
    """(offsets, bytes) of a pyarrow string array, as numpy arrays (no copy)."""
    import numpy as np

    _, offsets, data = values.buffers()
    offsets = np.frombuffer(offsets, dtype=np.int32)[values.offset:values.offset + len(values) + 1]
    data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
    return offsets, data


def _starts_with_any(values, first_bytes):
    """Per cell of a pyarrow string array: does it start with one of ``first_bytes``?"""
    import numpy as np

    offsets, data = _string_parts(values)
    starts = offsets[:-1]
    nonempty = offsets[1:] > starts
    out = np.zeros(len(values), dtype=bool)
    if nonempty.any():
        out[nonempty] = np.isin(data[starts[nonempty]], np.fromiter(first_bytes, dtype=np.uint8))
    if values.null_count:
        out &= np.asarray(values.is_valid(), dtype=bool)
    return out


def holds_any(values, chars: bytes) -> bool:
    """Does any cell of a pyarrow string array hold one of the ASCII ``chars``?"""
    import numpy as np

    offsets, data = _string_parts(values)
    used = data[int(offsets[0]):int(offsets[-1])] if len(offsets) else data[:0]
    return bool(np.isin(used, np.frombuffer(chars, dtype=np.uint8)).any())


def csv_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every text cell passed through :func:`csv_cell`."""
    import pandas as pd

    out = frame.copy()
    for column in out.columns:
        if out[column].dtype == object or pd.api.types.is_string_dtype(out[column]):
            out[column] = out[column].map(csv_cell)
    out.columns = [csv_cell(str(c)) for c in out.columns]
    return out


def one_line(value: Any) -> str:
    """``value`` as one line of text (lines joined by spaces), control characters shown as ``?``."""
    return _CONTROL.sub("?", " ".join(("" if value is None else str(value)).splitlines()))


def md_cell(value: Any) -> str:
    """Plain text for a Markdown table cell: one line, control characters removed, punctuation escaped."""
    try:
        return _md_cell_cached(value)
    except TypeError:  # an unhashable value
        return _md_cell(value)


def _md_cell(value: Any) -> str:
    return _MD_SPECIAL.sub(r"\\\1", one_line(value))


# Keyed by value *and* type (typed): True and 1, 1 and 1.0 are different cells.
_md_cell_cached = functools.lru_cache(maxsize=1 << 16, typed=True)(_md_cell)
_csv_text_cached = functools.lru_cache(maxsize=1 << 16, typed=True)(_csv_text)


def md_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Every cell of ``frame`` as :func:`md_cell` text (numbers keep their digits)."""
    return frame.astype(object).map(md_cell) if hasattr(frame, "map") else frame.astype(object).applymap(md_cell)


def unicode_text(text: str) -> str:
    """``text`` with lone surrogates -- bytes a non-UTF-8 locale could not decode, kept by
    ``surrogateescape`` (a file name under ``LC_ALL=C``) -- read as the UTF-8 they stand for;
    what is not UTF-8 becomes U+FFFD. Text without them comes back as it is."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raw = text.encode("utf-8", "surrogatepass")
    return raw.decode("utf-8", "replace")


def terminal(text: str) -> str:
    """``text`` with control characters (ANSI escape sequences among them), bidi and zero-width
    characters shown as ``?``; newlines (and tabs) kept."""
    return _CONTROL.sub("?", str(text))


def csv_file_text(text: str) -> str:
    """The text of a CSV file with what :func:`csv_cell` hides hidden (its cells made by
    :func:`csv_text` already are: nothing changes)."""
    return _CSV_CONTROL.sub("?", text)


def plain_text(text: str) -> str:
    """The text of a Markdown or HTML file, as :func:`terminal` shows it: what someone may
    ``cat`` or open holds no escape sequence, no bidi override, no zero-width character."""
    return _CONTROL.sub("?", text)


@contextlib.contextmanager
def narrow_characters():
    """tabulate's layout with every character one column wide, whether or not ``wcwidth`` is
    installed (the same bytes on every machine); its setting is put back after."""
    import tabulate

    saved = getattr(tabulate, "WIDE_CHARS_MODE", False)
    tabulate.WIDE_CHARS_MODE = False
    try:
        yield
    finally:
        tabulate.WIDE_CHARS_MODE = saved


def markdown_table(rows, headers) -> str:
    """``rows`` under ``headers`` (cell text as given) as a GitHub Markdown table."""
    from tabulate import tabulate

    with narrow_characters():
        return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def markdown_frame(frame: "pd.DataFrame") -> str:
    """``frame`` (made safe by :func:`md_frame`) as a GitHub Markdown table, without its index."""
    with narrow_characters():
        return md_frame(frame).to_markdown(index=False, disable_numparse=True)
