"""The golden file format: canonical bytes, loading and schema validation (docs/CONTRACT.md §5).

A golden file is ``{"contract": {"name", "version"}, "generator": {"tool",
"version"}, "vectors": [...]}``; the vector layout is described in
`area.py`. Canonical bytes are ``json.dumps(doc, indent=1, sort_keys=True,
ensure_ascii=True) + "\\n"``: sorted keys, no timestamps, so regenerating
unchanged goldens gives the same bytes. One JSON Schema (`schema.json`
beside the committed goldens, shipped in the wheel) describes every area;
vector-id uniqueness, which JSON Schema cannot express, is checked here.

Errors are `GoldenFileError` with a message naming the file: the gate
maps them to exit code 2.

Input bounds (a golden file is input the gate did not write): at
most MAX_FILE_BYTES bytes (checked from the size before
reading), nesting at most MAX_DEPTH brackets deep (counted without
recursion before the JSON parser runs), no duplicate object keys (a
tampered `expected` must not hide behind a good one: the last would win).
Schema validation is compiled once and applied per vector *skeleton*
(`_skeleton`): bit arrays are checked by one regex per value and every
vector of one shape is validated by jsonschema once, so 100,000 vectors
validate in seconds; the verdict equals full jsonschema validation
(tests/test_goldens_hostile.py checks it property-wise).

Writes are atomic through a temp file named ``.<file>.pid<PID>.<random>.tmp``
beside the target; `clean_stale_temps` removes those whose process is gone
(a SIGKILLed `generate`), and MANIFEST.in keeps ``*.tmp`` out of the sdist.
"""
from __future__ import annotations

import json
import os
import re
import time
from functools import lru_cache
from pathlib import Path

import jsonschema
import numpy as np

from .. import jsonin, paths
from ..report import atomic_file

SCHEMA_NAME = "schema.json"
GENERATOR_TOOL = "esverify"


#: Largest golden file read (bytes): 100,000 small vectors take about 70 MB; the committed files 1.6 MB.
MAX_FILE_BYTES = 128 * 1024 * 1024
#: Deepest bracket nesting accepted; the schema needs 6 (file, vectors, vector, inputs, record, bit array).
MAX_DEPTH = 32
#: Bit-array value patterns, exactly the schema's (`$defs/bitArray`; a test compares them).
BIT_PATTERNS = {"f64": re.compile(r"0x[0-9a-f]{16}"), "u64": re.compile(r"0x[0-9a-f]{16}"),
                "f32": re.compile(r"0x[0-9a-f]{8}"), "u32": re.compile(r"0x[0-9a-f]{8}"),
                "f16": re.compile(r"0x[0-9a-f]{4}"), "bf16": re.compile(r"0x[0-9a-f]{4}")}
_U64 = BIT_PATTERNS["u64"]
_ID = re.compile(r"[a-z0-9][a-z0-9._-]*")


class GoldenFileError(Exception):
    """A golden file is missing, unreadable, hostile (too large, too deep, duplicate keys),
    fails the schema or has the wrong version."""


def nesting_depth(raw: bytes) -> int:
    """Deepest [ / { nesting of JSON text, counted without recursion (see esverify.jsonin)."""
    return jsonin.nesting_depth(raw)


def golden_path(directory: Path, area: str) -> Path:
    """`<directory>/<area>.json`."""
    return Path(directory) / f"{area}.json"


def schema_path() -> Path:
    """The schema shipped with this esverify (checkout `goldens/` or the wheel's data)."""
    return paths.goldens_dir() / SCHEMA_NAME


@lru_cache(maxsize=1)
def _schema() -> dict:
    path = schema_path()
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise GoldenFileError(f"cannot read the golden schema {path}: {exc}") from exc
    jsonschema.validators.validator_for(schema).check_schema(schema)
    return schema


@lru_cache(maxsize=1)
def _validator() -> jsonschema.protocols.Validator:
    schema = _schema()
    return jsonschema.validators.validator_for(schema)(schema)


@lru_cache(maxsize=1)
def _vector_validator() -> jsonschema.protocols.Validator:
    """The schema's `$defs/vector`, compiled once (resolving its $refs within the same document)."""
    schema = _schema()
    sub = {"$schema": schema.get("$schema"), "$defs": schema["$defs"], "$ref": "#/$defs/vector"}
    return jsonschema.validators.validator_for(schema)(sub)


def _skeleton(value, in_vector_top: bool = False):
    """What the schema can see of a vector, with everything it cannot distinguish made equal.

    Bit arrays whose values all match their format's pattern become
    ``{"format": F, "values": []}``; u64 strings become one u64, other
    strings not starting with "0x" one name; integers 0; lists the set of
    their distinct item skeletons; a valid id and a non-empty comment one
    each. Keys, booleans, nulls, non-integral numbers and anything the
    schema would refuse are kept as they are, so the schema's verdict on
    the skeleton is its verdict on the vector. Depth is bounded by
    MAX_DEPTH before this runs.
    """
    if isinstance(value, dict):
        if value.keys() == {"format", "values"} and not in_vector_top:
            fmt, values = value["format"], value["values"]
            pattern = BIT_PATTERNS.get(fmt) if isinstance(fmt, str) else None
            if pattern is not None and isinstance(values, list) and all(
                    isinstance(v, str) and pattern.fullmatch(v) for v in values):
                return {"format": fmt, "values": []}
        out = {k: _skeleton(v) for k, v in value.items()}
        if in_vector_top:   # kept as they are unless valid: the schema then sees the real value
            if "id" in value:
                out["id"] = "a" if isinstance(value["id"], str) and _ID.fullmatch(value["id"]) else value["id"]
            if "comment" in value:
                out["comment"] = "c" if isinstance(value["comment"], str) and value["comment"] else value["comment"]
        return out
    if isinstance(value, list):
        items = {}
        for item in value:
            sk = _skeleton(item)
            items.setdefault(json.dumps(sk, sort_keys=True), sk)
        return [items[k] for k in sorted(items)]
    if isinstance(value, str):
        if _U64.fullmatch(value):
            return "0x0000000000000000"
        return value if value.startswith("0x") else "n"
    if isinstance(value, int) and not isinstance(value, bool):
        return 0
    return value


def _schema_error(validator, instance, source: str, prefix: str = ""):
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is None:
        return None
    where = "/".join([prefix] * bool(prefix) + [str(p) for p in error.absolute_path]) or "(top level)"
    return GoldenFileError(f"{source} fails the golden schema at {where}: {error.message}")


def dumps(doc: dict) -> str:
    """Canonical text of a golden document (sorted keys, ASCII, trailing newline)."""
    return json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=True) + "\n"


def make_document(area: str, version: int, vectors: list[dict]) -> dict:
    """A golden document for `area` at `version`; the generator stamp holds no time.

    The stamp names numpy's version too: z-score coefficients take numpy's own
    mean and std (docs/numerics.md §2), so numpy is part of what the es profiles depend on.
    """
    from .. import __version__
    return {"contract": {"name": area, "version": int(version)},
            "generator": {"tool": GENERATOR_TOOL, "version": __version__, "numpy": np.__version__},
            "vectors": vectors}


def validate(doc, source: str) -> dict:
    """Check `doc` against the schema and for unique vector ids; returns it.

    The document without its vectors goes through jsonschema; each vector
    through the compiled `$defs/vector` validator once per distinct
    `_skeleton` (the same verdict, at a fraction of the cost). Raises
    GoldenFileError naming `source` and the first offending path.
    """
    vectors = doc.get("vectors") if isinstance(doc, dict) else None
    if not isinstance(vectors, list):
        error = _schema_error(_validator(), doc, source)
        if error is not None:
            raise error
    else:
        error = _schema_error(_validator(), {**doc, "vectors": []}, source)
        if error is not None:
            raise error
        checked: set[str] = set()
        vector_validator = _vector_validator()
        for k, vector in enumerate(vectors):
            skeleton = _skeleton(vector, in_vector_top=isinstance(vector, dict))
            key = json.dumps(skeleton, sort_keys=True)
            if key in checked:
                continue
            if next(vector_validator.iter_errors(skeleton), None) is not None:
                # the real vector gives the error its real path and value
                raise _schema_error(vector_validator, vector, source, f"vectors/{k}") or GoldenFileError(
                    f"{source} fails the golden schema at vectors/{k}")
            checked.add(key)
    seen = set()
    for vector in doc["vectors"]:
        if vector["id"] in seen:
            raise GoldenFileError(f"{source} fails the golden schema: duplicate vector id {vector['id']!r}")
        seen.add(vector["id"])
    return doc


def parse(text: str | bytes, source: str) -> dict:
    """Parse and validate a golden document from text; GoldenFileError on failure.

    Refused before parsing: more than MAX_FILE_BYTES bytes, nesting deeper
    than MAX_DEPTH; while parsing: a duplicate key in any object.
    """
    try:
        doc = jsonin.loads(text, source, max_bytes=MAX_FILE_BYTES, max_depth=MAX_DEPTH, duplicate_keys=False)
    except jsonin.JSONInputError as exc:
        if exc.reason == "depth":
            raise GoldenFileError(f"{exc} (the golden schema needs 6)") from None
        if exc.reason == "size":
            raise GoldenFileError(f"{exc} of a golden file") from None
        if exc.reason == "duplicate-key":
            raise GoldenFileError(str(exc)) from None
        raise GoldenFileError(f"{source} is not readable JSON: {exc}") from None
    return validate(doc, source)


def load(path: Path) -> dict:
    """Read, parse and validate the golden file at `path`.

    Raises GoldenFileError when it is missing, unreadable or fails the schema.
    """
    path = Path(path)
    if not path.is_file():
        raise GoldenFileError(f"golden file {path} is missing")
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise GoldenFileError(f"golden file {path} is {size} bytes, over the {MAX_FILE_BYTES}-byte bound")
        with open(path, "rb") as fh:
            text = fh.read(MAX_FILE_BYTES + 1)     # the file may have grown since stat
    except OSError as exc:
        raise GoldenFileError(f"golden file {path} is unreadable: {exc}") from exc
    return parse(text, str(path))


def write(path: Path, doc: dict) -> bool:
    """Validate and write `doc` atomically; returns True when the bytes changed."""
    validate(doc, str(path))
    text = dumps(doc)
    path = Path(path)
    if path.is_file() and path.read_bytes() == text.encode("ascii"):
        return False
    write_golden_file(path, text)
    return True


TEMP_SUFFIX = ".tmp"


def write_golden_file(path: Path, text: str) -> None:
    """Write `text` atomically: a temp file ``.<name>.pid<PID>.<random>.tmp`` beside `path`, fsync, rename.

    The PID in the name lets `clean_stale_temps` tell a temp file of a
    killed process from one being written now.
    """
    path = Path(path)
    data = text.encode("utf-8")
    atomic_file(path, lambda fh: fh.write(data), prefix=f".{path.name}.pid{os.getpid()}.")


_TEMP_NAME = re.compile(r"\.(?P<target>[^/]+\.json)\.(?:pid(?P<pid>\d+)\.)?[^/]*\.tmp")
#: A temp file without a PID in its name (written by an older esverify) is stale after this long.
STALE_AFTER_S = 600


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale_temps(directory: Path) -> list[Path]:
    """Remove golden temp files left by a killed writer; returns those removed (never raises).

    A temp file is stale when the process named in it is gone (or, without
    a PID, when it is older than STALE_AFTER_S seconds).
    """
    removed = []
    try:
        candidates = sorted(Path(directory).glob(f".*.json.*{TEMP_SUFFIX}"))
    except OSError:
        return removed
    for tmp in candidates:
        m = _TEMP_NAME.fullmatch(tmp.name)
        if m is None:
            continue
        try:
            stale = (not _alive(int(m["pid"])) if m["pid"] and int(m["pid"]) != os.getpid() else
                     m["pid"] is None and time.time() - tmp.stat().st_mtime > STALE_AFTER_S)
            if stale:
                tmp.unlink()
                removed.append(tmp)
        except OSError:
            continue
    return removed


def by_id(doc: dict) -> dict[str, dict]:
    """Vectors of a document keyed by id (ids are unique after `validate`)."""
    return {v["id"]: v for v in doc["vectors"]}


def bits_of(vector: dict) -> dict:
    """The part of a vector that the contract pins: inputs and expected (not the comment)."""
    return {"inputs": vector["inputs"], "expected": vector["expected"]}


def diff_ids(old: dict, new: dict) -> dict[str, list[str]]:
    """Per-id comparison of two documents: {"new", "changed", "removed"} id lists.

    A vector is changed when its inputs or expected bits differ; comments are free.
    """
    a, b = by_id(old), by_id(new)
    return {"new": [i for i in b if i not in a],
            "changed": [i for i in b if i in a and bits_of(a[i]) != bits_of(b[i])],
            "removed": [i for i in a if i not in b]}
