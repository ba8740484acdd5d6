"""One bounded JSON reader for every input esverify did not write.

Outside JSON reaches esverify as wrapper reply headers (docs/PROTOCOL.md
§2), ``parity --case-json`` (docs/parity.md), notebooks in an audited tree
(docs/audit.md), the child's coverage file, an interpreter probe's answer
and golden files (docs/goldens.md, *Input bounds*). Python's parser fails
in more ways than `json.JSONDecodeError`: `UnicodeDecodeError` (bytes that
are not UTF-8/16/32), `ValueError` from the 4300-digit integer limit
(``sys.get_int_max_str_digits``), and `RecursionError` on deep nesting
(about 1,000 brackets crash the C scanner's recursion guard, far fewer in a
thread with a small stack). `loads` checks the size and the nesting depth
*before* the parser runs (depth counted over the bytes, without recursion)
and turns every parser failure into one `JSONInputError`, a `ValueError`
whose message names the input. It is strict JSON (RFC 8259): an object
holding one key twice is refused (Python keeps the last copy silently, so
a verdict would depend on which copy an attacker puts last), and so are
the non-finite literals `NaN`, `Infinity`, `-Infinity` and numbers that
overflow to an infinity (`1e999`). Each caller maps it to its documented
outcome: a protocol error (a wrapper: `wire.FrameError`, setup error exit 2
or an `error` row), a usage error (``--case-json``: exit 2), a readability
finding (a notebook: audit exit 1), a golden-file error (exit 2).

Out: `dumps` is the one writer of the JSON esverify writes for others
(reports, run logs, replay state): `allow_nan=False`, with every
non-finite float written as the string "nan", "inf" or "-inf" first, so
that the output is always valid JSON (the report schemas say so).

This module imports no other esverify module.
"""
from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path


#: Default nesting bound: every format esverify reads needs at most 8 (golden files), the wrapper
#: protocol's headers 5, a notebook 6 (cells, outputs, data, mime bundle, lines).
MAX_DEPTH = 32
#: Default size bound of one outside JSON text.
MAX_BYTES = 16 << 20

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)    # unrolled loop: linear and fast


class JSONInputError(ValueError):
    """Outside JSON that is too large, too deep, not decodable, not JSON, or that the parser refused.

    ``reason`` is one of "size", "depth", "encoding", "syntax", "integer" (a number past the
    interpreter's digit limit), "duplicate-key", "non-finite" (NaN, Infinity, a number overflowing
    to one), "recursion"."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def nesting_depth(raw: bytes) -> int:
    """Deepest [ / { nesting of UTF-8 JSON text, counted without recursion (brackets in strings ignored)."""
    import numpy as np   # here, not at the top: `esverify audit --help` loads this module
    stripped = np.frombuffer(_STRING.sub(b'""', raw), dtype=np.uint8)
    step = ((stripped == ord("[")) | (stripped == ord("{"))).astype(np.int64)
    step -= ((stripped == ord("]")) | (stripped == ord("}"))).astype(np.int64)
    return int(np.cumsum(step).max()) if step.size else 0


class _DuplicateKey(ValueError):
    pass


class _NonFinite(ValueError):
    pass


def _no_constant(name: str):
    raise _NonFinite(f"the non-finite literal {name} (not JSON, RFC 8259 §6)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NonFinite(f"the number {text[:40]} overflows to {value} (no finite double)")
    return value


def _no_duplicate_keys(pairs):
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(f"duplicate key {key!r} in one object (the last would silently win)")
            seen.add(key)
    return obj


def _utf8(data: str | bytes | bytearray | memoryview, source: str) -> bytes:
    """The text as UTF-8 bytes; bytes in UTF-16/32 are recognised as `json.loads` does (RFC 8259 §8.1)."""
    if isinstance(data, str):
        try:
            return data.encode("utf-8")
        except UnicodeEncodeError as exc:   # a lone surrogate: not text any JSON writer produces
            raise JSONInputError(f"{source} is not valid Unicode text ({exc})", "encoding") from None
    raw = bytes(data)
    encoding = json.detect_encoding(raw)
    if encoding in ("utf-8", "utf-8-sig"):
        try:
            raw.decode(encoding)
        except UnicodeDecodeError as exc:
            raise JSONInputError(f"{source} is not UTF-8 ({exc})", "encoding") from None
        return raw[3:] if encoding == "utf-8-sig" else raw
    try:
        return raw.decode(encoding).encode("utf-8")
    except (UnicodeDecodeError, UnicodeEncodeError) as exc:
        raise JSONInputError(f"{source} is not {encoding} text ({exc})", "encoding") from None


def loads(data: str | bytes | bytearray | memoryview, source: str, *, max_bytes: int = MAX_BYTES,
          max_depth: int = MAX_DEPTH, duplicate_keys: bool = False, nonfinite: bool = False):
    """Parse outside JSON text, bounded and strict; returns the Python value.

    data: str, or bytes in UTF-8 (or UTF-16/32, detected as RFC 8259 allows);
    source: how messages name the input ("the wrapper's reply header",
    "--case-json", a path). Refused before parsing: more than `max_bytes`
    bytes, nesting deeper than `max_depth`. Refused while parsing: an object
    holding one key twice (`duplicate_keys=True` lets the last win, as plain
    Python does: only for a caller that documents why), NaN, Infinity,
    -Infinity and numbers overflowing to an infinity (`nonfinite=True` reads
    them as floats: only for the replies of esverify's own child server,
    whose Python writer spells a reference's NaN reward that way). Raises
    JSONInputError (a ValueError) for every failure, never RecursionError,
    UnicodeDecodeError or the integer-limit ValueError.
    """
    size = len(data) if not isinstance(data, str) else len(data.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise JSONInputError(f"{source} is {size} bytes, over the bound of {max_bytes} bytes", "size")
    raw = _utf8(data, source)
    depth = nesting_depth(raw)
    if depth > max_depth:
        raise JSONInputError(f"{source} nests {depth} brackets deep, over the bound of {max_depth}", "depth")
    try:
        return json.loads(raw, object_pairs_hook=None if duplicate_keys else _no_duplicate_keys,
                          **({} if nonfinite else {"parse_constant": _no_constant, "parse_float": _finite_float}))
    except _DuplicateKey as exc:
        raise JSONInputError(f"{source} is refused: {exc}", "duplicate-key") from None
    except _NonFinite as exc:
        raise JSONInputError(f"{source} is refused: it holds {exc}", "non-finite") from None
    except json.JSONDecodeError as exc:
        raise JSONInputError(f"{source} is not JSON: {exc}", "syntax") from None
    except UnicodeDecodeError as exc:
        raise JSONInputError(f"{source} is not decodable text ({exc})", "encoding") from None
    except RecursionError:
        raise JSONInputError(f"{source} nests too deep for the parser", "recursion") from None
    except ValueError as exc:   # the 4300-digit integer limit (sys.set_int_max_str_digits) and kin
        raise JSONInputError(f"{source} holds a value the parser refuses: {exc}", "integer") from None


def load_path(path: str | os.PathLike, source: str | None = None, *, max_bytes: int = MAX_BYTES,
              max_depth: int = MAX_DEPTH, duplicate_keys: bool = False):
    """`loads` of a file, its size checked from the file before reading. OSError is left to the caller."""
    path = Path(path)
    source = source or str(path)
    size = path.stat().st_size
    if size > max_bytes:
        raise JSONInputError(f"{source} is {size} bytes, over the bound of {max_bytes} bytes", "size")
    with open(path, "rb") as fh:
        raw = fh.read(max_bytes + 1)     # the file may have grown since stat
    return loads(raw, source, max_bytes=max_bytes, max_depth=max_depth, duplicate_keys=duplicate_keys)


def finite(value):
    """`value` with every non-finite float (at any depth of dicts, lists and tuples) as "nan", "inf" or "-inf"."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if value != value else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(value, **kwargs) -> str:
    """Strict JSON text of `value` (json.dumps keywords pass through): `allow_nan=False`, non-finite floats
    written as the strings "nan", "inf", "-inf" (`finite`), so a reader never meets NaN or Infinity."""
    return json.dumps(finite(value), allow_nan=False, **kwargs)
