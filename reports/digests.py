"""Digests: of each row's ``detail.fingerprints`` (for ``diff``, found without parsing the
row where that is exact) and of the merged rows (``summary.json``)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from detconf.reports.lines import Chunk, Lines

# Where a row's fingerprints object is, without parsing the row: the key spelled out, then a
# flat object, found by RE2 over the chunk's lines as an Arrow array (no copy). This is exact
# where the line holds the key spelled out once and spells no ASCII letter as an escape (so the
# one key found is the row's: an escaped key would need a letter escape, a second key a second
# spelling), and the object holds no brace or backslash and an even number of quotes (so it is
# the whole object). Other rows are parsed.
_FP_KEY = '"fingerprints"'
_FP_PATTERN = r'"fingerprints"[ \t\r\n]*:[ \t\r\n]*(?P<fp>\{[^{}\\]*\})'
_LETTER_ESCAPE = r"\\u00[4-7]"
#: Bytes of a fingerprints digest.
DIGEST_BYTES = 16
NO_DIGEST = bytes(DIGEST_BYTES)


def text_digest(text: bytes) -> bytes:
    return hashlib.blake2b(text, digest_size=DIGEST_BYTES).digest()


def canonical_digest(fingerprints) -> bytes:
    return text_digest(json.dumps(fingerprints, sort_keys=True, ensure_ascii=False).encode("utf-8", "surrogatepass"))


def fingerprint_digests(data: Chunk, lines: Lines, result_rows: np.ndarray, has: pa.ChunkedArray) -> list:
    """Per result row of a chunk: a digest of the text of its ``detail.fingerprints`` (equal
    digests: equal objects), or None where it has none."""
    bounds = np.append(lines.starts, len(data)).astype(np.int32)
    every_line = pa.StringArray.from_buffers(lines.count, pa.py_buffer(bounds), pa.py_buffer(data.view()))
    rows = every_line.take(pa.array(result_rows))
    has = np.asarray(has.combine_chunks() if isinstance(has, pa.ChunkedArray) else has, dtype=bool)
    capture = pc.struct_field(pc.extract_regex(rows, _FP_PATTERN), "fp")
    found = np.asarray(capture.is_valid(), dtype=bool)
    # One spelled-out key per row that has fingerprints, none elsewhere: counted over the whole
    # chunk when that settles it, else row by row.
    if data.count(_FP_KEY.encode()) == int(has.sum()) and not (has & ~found).any():
        once = np.ones(len(rows), dtype=bool)
    else:
        once = np.asarray(pc.equal(pc.count_substring(rows, _FP_KEY), 1), dtype=bool)
    simple = (once & found & ~np.asarray(pc.match_substring_regex(rows, _LETTER_ESCAPE), dtype=bool)
              & np.asarray(pc.fill_null(pc.equal(pc.bit_wise_and(pc.count_substring(capture, '"'), 1), 0), False),
                           dtype=bool))
    texts = capture.cast(pa.binary()).to_pylist()
    out = []
    for k, (has_fp, ok) in enumerate(zip(has.tolist(), simple.tolist())):
        if not has_fp:
            out.append(None)
        elif ok:
            out.append(text_digest(texts[k]))
        else:
            i = int(result_rows[k])
            rec = json.loads(data[lines.starts[i]:lines.ends[i]])
            out.append(canonical_digest(rec["detail"]["fingerprints"]))
    return out



def rows_digest(texts: list[str]) -> str:
    """sha256 of the merged result rows: each line exactly as read (surrounding whitespace
    stripped) followed by a newline, in matrix order. Matrix order follows from the rows'
    content, so shuffling the lines of a file does not change the digest."""
    h = hashlib.sha256()
    for start in range(0, len(texts), 10_000):  # in slices: no second copy of all the text
        h.update(("\n".join(t.strip() for t in texts[start:start + 10_000]) + "\n").encode("utf-8"))
    return h.hexdigest()
