"""Outside JSON is read by one bounded reader (esverify/jsonin.py).

Every way Python's parser can fail on hostile text (nesting past its recursion guard, an integer past
the 4300-digit limit, bytes that are not UTF-8, a syntax error) becomes `JSONInputError`, and each
caller turns it into its documented outcome: `--case-json` a usage error (exit 2, one line), a
notebook in an audited tree a readability finding (exit 1), a wrapper's reply header a protocol error
(tests/test_impl_protocol.py: modes deep, bigint, badutf8), a golden file exit 2
(tests/test_goldens_hostile.py).
"""
from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from esverify import jsonin
from esverify.audit import sources
from esverify.cli import main
from esverify.impl import wire

DEEP = b"[" * 100_000 + b"]" * 100_000                         # past the C parser's recursion guard
BIGINT = b'{"population": ' + b"9" * 5000 + b"}"              # past sys.get_int_max_str_digits()
BAD_UTF8 = b'{"op": "\xff\xfe"}'
HOSTILE = {"depth": DEEP, "integer": BIGINT, "encoding": BAD_UTF8, "syntax": b"{not json"}


def test_the_inputs_really_break_the_plain_parser():
    """The hostile values are the right ones: plain json.loads raises what the reader must catch."""
    import json
    with pytest.raises(RecursionError):
        json.loads(DEEP)
    with pytest.raises(ValueError, match="Exceeds the limit"):
        json.loads(BIGINT)
    with pytest.raises(UnicodeDecodeError):
        json.loads(BAD_UTF8)


@pytest.mark.parametrize("reason", sorted(HOSTILE))
def test_every_parser_failure_is_one_json_input_error(reason):
    with pytest.raises(jsonin.JSONInputError) as info:
        jsonin.loads(HOSTILE[reason], "input")
    assert info.value.reason == reason and str(info.value).startswith("input ")


def test_depth_is_refused_before_the_parser_runs(monkeypatch):
    import json
    monkeypatch.setattr(json, "loads", lambda *a, **k: pytest.fail("parsed despite the depth bound"))
    with pytest.raises(jsonin.JSONInputError, match="nests 100000 brackets deep, over the bound of 32"):
        jsonin.loads(DEEP, "input")


def test_size_and_duplicate_keys_and_the_bounds_that_pass():
    with pytest.raises(jsonin.JSONInputError, match="is 11 bytes, over the bound of 10 bytes"):
        jsonin.loads(b'{"a": 1234}', "input", max_bytes=10)
    with pytest.raises(jsonin.JSONInputError, match="duplicate key 'a'"):
        jsonin.loads('{"a": 1, "a": 2}', "input", duplicate_keys=False)
    with pytest.raises(jsonin.JSONInputError, match="duplicate key 'a'"):   # refused by default too
        jsonin.loads('{"a": 1, "a": 2}', "input")
    assert jsonin.loads('{"a": 1, "a": 2}', "input", duplicate_keys=True) == {"a": 2}
    assert jsonin.loads(b"[" * 32 + b"]" * 32, "input") == eval("[" * 32 + "]" * 32)
    assert jsonin.loads('{"a": [1, "]]]"]}'.encode("utf-16"), "input") == {"a": [1, "]]]"]}   # RFC 8259 §8.1
    assert jsonin.loads(b'{"n": ' + b"9" * 4300 + b"}", "input")["n"] == int("9" * 4300)


def test_a_large_integer_limit_change_does_not_leak_a_value_error():
    """Whatever the interpreter's digit limit is set to, the error is a JSONInputError."""
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)
    try:
        with pytest.raises(jsonin.JSONInputError) as info:
            jsonin.loads(b"[" + b"1" * 641 + b"]", "input")
        assert info.value.reason == "integer"
    finally:
        sys.set_int_max_str_digits(old)


@pytest.mark.parametrize("reason", sorted(HOSTILE))
def test_a_wrapper_header_is_a_frame_error(reason):
    with pytest.raises(wire.FrameError, match="header is not UTF-8 JSON"):
        wire.decode(HOSTILE[reason], b"")


def test_a_utf16_header_is_a_frame_error():
    """jsonin accepts UTF-16 (RFC 8259 §8.1, for notebooks); the protocol's headers are UTF-8 only."""
    assert jsonin.loads('{"a": 1}'.encode("utf-16"), "input") == {"a": 1}
    with pytest.raises(wire.FrameError, match="UTF-16/32 is not accepted"):
        wire.decode('{"a": 1}'.encode("utf-16"), b"")


def test_a_descriptor_with_a_huge_shape_is_a_frame_error_not_an_overflow():
    head = b'{"t": {"dtype": "f32", "shape": [4294967296, 4294967296], "offset": 0}}'
    with pytest.raises(wire.FrameError, match="needs bytes up to"):
        wire.decode(head, b"")
    head = b'{"t": {"dtype": "f32", "shape": [' + b"9" * 30 + b'], "offset": 0}}'
    with pytest.raises(wire.FrameError, match="shape must be a list of non-negative integers"):
        wire.decode(head, b"")


@pytest.mark.parametrize("reason", sorted(HOSTILE))
def test_a_hostile_notebook_is_a_readability_finding(reason):
    entry = sources.classify("tree", "nb.ipynb", HOSTILE[reason])
    assert entry.kind == "unreadable" and "notebook is not readable JSON" in entry.error


@pytest.mark.parametrize("text", [DEEP.decode(), BIGINT.decode(), '{"handles": {"a": 1}}',
                                  '{"population": [1]}', "{not json"])
def test_hostile_case_json_is_a_usage_error(tmp_path, text):
    result = CliRunner().invoke(main, ["parity", "--case-json", text, "--out", str(tmp_path / "out"),
                                       "--quiet"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("esverify parity: error: --case-json"), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("text, words", [("a = " + "[" * 100_000 + "]" * 100_000, "RecursionError"),
                                         ("a = " + "9" * 5000, "Exceeds the limit"),
                                         ("project = 3", None)])
def test_a_hostile_pyproject_in_an_audited_tree_is_noted_not_a_crash(tmp_path, text, words):
    """The audit's provenance reads the tree's pyproject.toml (a config file from outside)."""
    from esverify.audit import provenance
    (tmp_path / "pyproject.toml").write_text(text)
    row = provenance.describe_root("tree", tmp_path)
    if words is None:
        assert "declared_licence" not in row
    else:
        assert row["declared_licence"].startswith("unreadable pyproject.toml") and words in row["declared_licence"]


# ------------------------------------------------------------------ strict in, strict out

_SCALARS = st.none() | st.booleans() | st.integers(-10 ** 6, 10 ** 6) | st.text(max_size=5) | \
    st.floats(allow_nan=False, allow_infinity=False)
_DOCS = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3) |
                     st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=12)
_POISON = {"NaN": "non-finite", "Infinity": "non-finite", "-Infinity": "non-finite", "1e999": "non-finite",
           "-2.5e400": "non-finite"}


def _embed(doc, text: str, path: list) -> str:
    """JSON text of `doc` with `text` (raw JSON) put where `path` (indices into the choices) leads."""
    import json
    marker = "\u0000marker\u0000"

    def put(node, depth):
        if isinstance(node, dict) and node and depth < len(path):
            key = sorted(node)[path[depth] % len(node)]
            return {**node, key: put(node[key], depth + 1)}
        if isinstance(node, list) and node and depth < len(path):
            i = path[depth] % len(node)
            return node[:i] + [put(node[i], depth + 1)] + node[i + 1:]
        return [marker]
    return json.dumps(put(doc, 0)).replace(json.dumps(marker), text)


@settings(max_examples=200, deadline=None)
@given(doc=_DOCS, poison=st.sampled_from(sorted(_POISON)), path=st.lists(st.integers(0, 5), max_size=4))
def test_a_non_finite_literal_anywhere_is_refused(doc, poison, path):
    with pytest.raises(jsonin.JSONInputError) as info:
        jsonin.loads(_embed(doc, poison, path), "input")
    assert info.value.reason == "non-finite"


@settings(max_examples=200, deadline=None)
@given(doc=_DOCS, key=st.text(max_size=3), path=st.lists(st.integers(0, 5), max_size=4))
def test_a_key_given_twice_anywhere_is_refused(doc, key, path):
    import json
    dup = "{" + f"{json.dumps(key)}: 1, {json.dumps(key)}: 2" + "}"
    with pytest.raises(jsonin.JSONInputError) as info:
        jsonin.loads(_embed(doc, dup, path), "input")
    assert info.value.reason == "duplicate-key" and repr(key) in str(info.value)


@settings(max_examples=200, deadline=None)
@given(doc=st.recursive(_SCALARS | st.floats(), lambda inner: st.lists(inner, max_size=3) |
                        st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=12))
def test_what_esverify_writes_is_strict_json_that_reads_back(doc):
    """jsonin.dumps never writes NaN/Infinity: non-finite floats become "nan", "inf", "-inf"."""
    import math
    back = jsonin.loads(jsonin.dumps(doc), "output")

    def same(a, b):
        if isinstance(a, float) and not math.isfinite(a):
            return b == ("nan" if a != a else "inf" if a > 0 else "-inf")
        if isinstance(a, (list, tuple)):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        return a == b
    assert same(doc, back)


@pytest.mark.parametrize("text", ['{"a": 1, "a": 2}', '{"a": NaN}', '{"a": [1e999]}'])
def test_a_strict_refusal_reaches_every_reader(text, tmp_path):
    """--case-json and a wrapper header refuse what the strict reader refuses (the readers of
    replay's run log, shard index and state are in tests/test_replay_verifier.py)."""
    from esverify.oracle import cases
    with pytest.raises(ValueError, match="--case-json is refused"):
        cases.from_json(text)
    with pytest.raises(wire.FrameError, match="header is not UTF-8 JSON"):
        wire.decode(text.encode(), b"")
