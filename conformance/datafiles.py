"""Reading the project's JSON data files: the catalog files and the known findings.

Each file is checked against its JSON Schema (``conformance/data/schemas/``, validated with the
``jsonschema`` library) before any field is read, so a wrong type, an unknown value or an unknown
key is refused rather than coerced (``"devices": "cuda"`` is not four one-letter devices). Every
problem is a :class:`engine.entry.CatalogError` with one line naming the file, the entry and the
field. JSON itself is read strictly too: a key given twice in one object and the non-standard
``NaN`` / ``Infinity`` literals are errors.

Formats the schemas use beyond JSON Schema's own keywords:

- ``pep440-specifier``: a PEP 440 version specifier in which every clause has an operator
  (``>=2.13``, ``==2.13.*``, ``>=2.5,<2.14``); a bare version such as ``2.13`` and an empty
  clause (``>=2.13,``) are refused.
"""
from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

from detconf.engine.entry import CatalogError

SCHEMAS = Path(__file__).resolve().parent / "data" / "schemas"

_ARTICLE_TYPES = {
    "array": "an array", "boolean": "a boolean (true or false)", "integer": "an integer", "null": "null",
    "number": "a number", "object": "an object", "string": "a string",
}


class _StrictJSONError(ValueError):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _StrictJSONError(f"key {key!r} appears twice in one object")
        obj[key] = value
    return obj


def _no_constants(name: str) -> Any:
    raise _StrictJSONError(f"{name} is not a JSON value")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value) if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _is_specifier(value: object) -> bool:
    """The ``pep440-specifier`` format: raises ``ValueError`` naming what is wrong."""
    from detconf.findings_rule import torch_range

    if not isinstance(value, str):
        return True  # the type keyword reports it
    torch_range(value)
    return True


@functools.lru_cache(maxsize=None)
def _validator(schema: str):
    """The validator of ``schemas/<schema>.schema.json``; a :class:`CatalogError` (one line) for
    a schema file that is missing, not JSON or not a JSON Schema."""
    from jsonschema import Draft202012Validator, FormatChecker, validators
    from jsonschema.exceptions import SchemaError

    path = SCHEMAS / f"{schema}.schema.json"
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        Draft202012Validator.check_schema(document)
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read the schema: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CatalogError(f"{path}: the schema is not JSON: {_short(' '.join(str(exc).split()), 90)}") from None
    except SchemaError as exc:
        raise CatalogError(f"{path}: not a valid JSON Schema: {_short(' '.join(exc.message.split()), 90)}") from None
    # JSON Schema counts 1.0 as an integer; a position or count written as 1.0 is a typo here.
    types = Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda checker, value: isinstance(value, int) and not isinstance(value, bool))
    strict = validators.extend(Draft202012Validator, type_checker=types)
    formats = FormatChecker(formats=())
    formats.checks("pep440-specifier", raises=ValueError)(_is_specifier)
    return strict(document, format_checker=formats)


def _field(path: list) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _problem(error) -> str:
    """What is wrong, worded for someone editing the file."""
    kind, value, schema = error.validator, error.instance, error.schema
    expected = schema.get("description") if isinstance(schema, dict) else None
    if kind == "additionalProperties":
        known = set(schema.get("properties", {}))
        extra = sorted(k for k in value if k not in known)
        return f"unknown field{'s' if len(extra) > 1 else ''} " + ", ".join(map(repr, extra))
    if kind == "required":
        missing = [name for name in error.validator_value if name not in value]
        return f"missing field{'s' if len(missing) > 1 else ''} " + ", ".join(map(repr, missing))
    if kind == "type":
        wanted = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        return (f"must be {' or '.join(_ARTICLE_TYPES.get(t, t) for t in wanted)}, "
                f"got {_ARTICLE_TYPES.get(_json_type(value), _json_type(value))} ({_short(value)})")
    if kind == "enum":
        return f"is {_short(value)}, expected one of " + ", ".join(map(_short, error.validator_value))
    if kind == "format":
        cause = f" ({error.cause})" if error.cause is not None else ""
        return f"is {_short(value)}{cause}, expected {expected or error.validator_value}"
    if kind == "pattern":
        return f"is {_short(value)}, expected " + (expected or f"text matching {error.validator_value!r}")
    if kind in ("minLength", "minItems"):
        return "must not be empty" + (f": {expected}" if expected else "")
    if kind == "uniqueItems":
        return f"lists an item twice ({_short(value)})"
    if kind == "minimum":
        return f"is {_short(value)}, expected at least {error.validator_value}"
    return _short(" ".join(error.message.split()), limit=90)


def _describe(error, path: Path, raw: Any, item: str) -> str:
    where = list(error.absolute_path)
    if not where:
        if error.validator == "type":
            return f"{path}: expected a JSON list of {item} objects, got {_ARTICLE_TYPES.get(_json_type(raw), 'something else')}"
        return f"{path}: {_problem(error)}"
    index, rest = where[0], where[1:]
    obj = raw[index]
    if not rest and error.validator == "type":
        return f"{path}: {item} #{index} is {_ARTICLE_TYPES.get(_json_type(obj), 'something else')}, expected an object"
    ident = obj.get("entry_id") if isinstance(obj, dict) else None
    label = f"malformed {item} #{index}" + (f" ({ident!r})" if isinstance(ident, str) else "")
    if not rest:
        return f"{path}: {label}: {_problem(error)}"
    return f"{path}: {label}: field {_field(rest)!r} {_problem(error)}"


#: The deepest a data file may nest (its entries need four levels; Python's own parser and the
#: schema check recurse once per level and stop near a thousand).
MAX_DEPTH = 64
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _nests_deeper(text: str, limit: int) -> bool:
    """Does the JSON ``text`` nest deeper than ``limit`` levels (brackets in strings do not count)?"""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for token in _STRING_OR_BRACKET.finditer(text):
        char = token.group()
        if char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


#: The texts that passed a schema in this process: ``(schema, text) -> the validator that passed
#: it`` (a schema read again, after ``_validator.cache_clear()``, checks every text again). A run
#: reads each catalog file twice (the options' check before torch is imported, then the catalog):
#: the second read of the same text is parsed again, not checked again.
_PASSED: dict[tuple[str, str], Any] = {}


def read_json(path: str | Path, schema: str, *, item: str) -> Any:
    """The parsed content of ``path`` once it validates against ``schemas/<schema>.schema.json``.

    ``item`` names one element of the file's list in messages (``"catalog entry"``). Raises
    :class:`CatalogError` (one line: file, entry, field) for an unreadable file, malformed or
    non-standard JSON, or the first schema violation (lowest entry first).
    """
    from jsonschema.exceptions import best_match

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise CatalogError(f"{path}: not UTF-8 text") from None
    known = _PASSED.get((schema, text))
    if known is not None and known is _validator(schema):  # this very text passed this schema before
        return json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constants)
    if _nests_deeper(text, MAX_DEPTH):
        raise CatalogError(f"{path}: malformed JSON: nested deeper than {MAX_DEPTH} levels")
    try:
        raw = json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constants)
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{path}:{exc.lineno}: malformed JSON: {exc.msg}") from None
    except _StrictJSONError as exc:
        raise CatalogError(f"{path}: malformed JSON: {exc}") from None
    except RecursionError:  # pragma: no cover - _nests_deeper finds it first
        raise CatalogError(f"{path}: malformed JSON: nested too deeply") from None
    validator = _validator(schema)
    try:
        errors = list(validator.iter_errors(raw))
    except RecursionError:  # pragma: no cover - _nests_deeper finds it first
        raise CatalogError(f"{path}: nested too deeply to check") from None
    if errors:
        def entry_of(error) -> int:
            where = list(error.absolute_path)
            return where[0] if where and isinstance(where[0], int) else -1

        first = min(map(entry_of, errors))
        error = best_match(e for e in errors if entry_of(e) == first)
        raise CatalogError(_describe(error, path, raw, item))
    _PASSED[schema, text] = validator
    return raw
