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
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import jsonschema

from .. import paths
from ..report import write_atomic

SCHEMA_NAME = "schema.json"
GENERATOR_TOOL = "esverify"


class GoldenFileError(Exception):
    """A golden file is missing, unreadable, fails the schema or has the wrong version."""


def golden_path(directory: Path, area: str) -> Path:
    """`<directory>/<area>.json`."""
    return Path(directory) / f"{area}.json"


def schema_path() -> Path:
    """The schema shipped with this esverify (checkout `goldens/` or the wheel's data)."""
    return paths.goldens_dir() / SCHEMA_NAME


@lru_cache(maxsize=1)
def _validator() -> jsonschema.protocols.Validator:
    path = schema_path()
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise GoldenFileError(f"cannot read the golden schema {path}: {exc}") from exc
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def dumps(doc: dict) -> str:
    """Canonical text of a golden document (sorted keys, ASCII, trailing newline)."""
    return json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=True) + "\n"


def make_document(area: str, version: int, vectors: list[dict]) -> dict:
    """A golden document for `area` at `version`; the generator stamp holds no time."""
    from .. import __version__
    return {"contract": {"name": area, "version": int(version)},
            "generator": {"tool": GENERATOR_TOOL, "version": __version__},
            "vectors": vectors}


def validate(doc, source: str) -> dict:
    """Check `doc` against the schema and for unique vector ids; returns it.

    Raises GoldenFileError naming `source` and the first offending path.
    """
    error = jsonschema.exceptions.best_match(_validator().iter_errors(doc))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise GoldenFileError(f"{source} fails the golden schema at {where}: {error.message}")
    seen = set()
    for vector in doc["vectors"]:
        if vector["id"] in seen:
            raise GoldenFileError(f"{source} fails the golden schema: duplicate vector id {vector['id']!r}")
        seen.add(vector["id"])
    return doc


def parse(text: str | bytes, source: str) -> dict:
    """Parse and validate a golden document from text; GoldenFileError on failure."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise GoldenFileError(f"{source} is not readable JSON: {exc}") from exc
    return validate(doc, source)


def load(path: Path) -> dict:
    """Read, parse and validate the golden file at `path`.

    Raises GoldenFileError when it is missing, unreadable or fails the schema.
    """
    path = Path(path)
    if not path.is_file():
        raise GoldenFileError(f"golden file {path} is missing")
    try:
        text = path.read_bytes()
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
    write_atomic(path, text)
    return True


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
