"""The parity cases of a run: the matrix, a case as text, the check, fuzzing (docs/parity.md, "The matrix").

Design record: a case is pure data (esverify.oracle.case_model);
each reference's adapter builds its part of the matrix, checks, draws and
shrinks its cases (esverify.oracle.adapters), and this module puts them
together: `build_matrix` over the adapters asked for, `select` (--case),
`to_json`/`from_json` (--case-json), `check`, and `random_case` /
`shrink_candidates` for --fuzz. The names below the imports are the
case model's, kept here for the callers that build or read cases.
"""
from __future__ import annotations

import fnmatch
import json
from dataclasses import asdict

import numpy as np

from .case_model import (CASE_ALPHA, CASE_POPULATION, CASE_SIGMA, DEFAULT_CASE_SEED, FUZZ_DTYPES, HANDLE_GAP,
                         HANDLE_MAX, NOISES, PERTURB_MEMBER, POPULATIONS, REWARD_SHAPES, REWARD_TARGET,
                         Case, check_common, draw_handles, draw_lambda, draw_population, draw_sigma_alpha,
                         finish_case, generic_shrink_candidates, main_population, random_case_of, walk_cells)

__all__ = ["CASE_ALPHA", "CASE_JSON_MAX_BYTES", "CASE_POPULATION", "CASE_SIGMA", "DEFAULT_CASE_SEED", "FUZZ_DTYPES",
           "HANDLE_GAP", "HANDLE_MAX", "NOISES", "PERTURB_MEMBER", "POPULATIONS", "REWARD_SHAPES",
           "REWARD_TARGET", "Case", "build_matrix", "check", "check_common", "draw_handles", "draw_lambda",
           "draw_population", "draw_sigma_alpha", "finish_case", "from_json", "generic_shrink_candidates",
           "main_population", "random_case", "random_case_of", "select", "shrink_candidates", "to_json",
           "walk_cells"]


def build_matrix(targets, devices, dtypes, schemes, population=None, sigma=None, alpha=None, iterations=3,
                 small=False, noises=NOISES, case_seed=DEFAULT_CASE_SEED, loops=True):
    """All cases, in a stable order (target, device, noise, dtype, scheme, op), with unique ids.

    targets: adapter names (esverify.oracle.adapters); each adapter builds its own part
    (`Adapter.cases`). population/sigma/alpha: None draws them from `case_seed` (see the module
    docstring); a value fixes it for every case but the paper's. `loops` adds the training-loop rows.
    """
    from .adapters import MatrixSpec, get
    targets, devices, dtypes, schemes, noises = (tuple(dict.fromkeys(v)) for v in
                                                 (targets, devices, dtypes, schemes, noises))
    matrix = MatrixSpec(devices=devices, dtypes=dtypes, schemes=schemes, population=population, sigma=sigma,
                        alpha=alpha, iterations=iterations, small=small, noises=noises, case_seed=case_seed,
                        loops=loops)
    cases = []
    for target in targets:
        cases += get(target).cases(matrix)
    return cases


def select(cases, pattern: str | None):
    """Cases whose id matches `pattern` (fnmatch; without wildcards, the one case with exactly that id
    when there is one, so that a report's re-run command selects only its row; else a substring)."""
    if not pattern:
        return list(cases)
    if not any(ch in pattern for ch in "*?["):
        exact = [c for c in cases if c.case_id == pattern]
        return exact or [c for c in cases if pattern in c.case_id]
    return [c for c in cases if fnmatch.fnmatchcase(c.case_id, pattern)]


# ------------------------------------------------------------------ one case as text (--case-json)

def to_json(case: Case) -> str:
    """One line of JSON holding every field of `case` (compact; see from_json)."""
    data = asdict(case)
    data["handles"] = list(case.handles)
    data["shapes"] = [[n, list(s)] for n, s in case.shapes] if case.shapes is not None else None
    data["ties"] = [list(pair) for pair in case.ties]
    return json.dumps(data, separators=(",", ":"), sort_keys=True)


#: A case is a few hundred bytes; anything this large is not one.
CASE_JSON_MAX_BYTES = 1 << 20


def from_json(text: str) -> Case:
    """The case `to_json` wrote; ValueError naming what is wrong."""
    from .. import jsonin
    data = jsonin.loads(text, "--case-json", max_bytes=CASE_JSON_MAX_BYTES)   # a ValueError naming it
    if not isinstance(data, dict):
        raise ValueError("--case-json must be a JSON object of Case fields")
    known = set(Case.__dataclass_fields__)
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"--case-json: unknown fields {unknown}")
    try:
        case = Case(**data)
        case.handles = tuple(int(h) for h in case.handles)
        if case.shapes is not None:
            case.shapes = tuple((str(n), tuple(int(d) for d in s)) for n, s in case.shapes)
        try:
            case.ties = tuple((str(a), str(t)) for a, t in case.ties)
        except (TypeError, ValueError):
            raise ValueError("--case-json: ties must be a list of [alias, slot name] pairs") from None
        check(case)
    except (TypeError, OverflowError) as exc:   # a field of the wrong type: still a usage error, not a traceback
        raise ValueError(f"--case-json: {type(exc).__name__}: {exc}") from None
    return case


def check(case: Case) -> Case:
    """ValueError when a case cannot run: unknown op for its target, bad scheme/noise pair, too few
    handles, population or parameters out of range."""
    from .adapters import get, names
    if case.target not in names():
        raise ValueError(f"case: unknown target {case.target!r}; known: {names()}")
    get(case.target).check_case(case)
    return check_common(case)


def random_case(rng: np.random.Generator, targets, device: str = "cpu", noises=NOISES, iterations=2) -> Case:
    """One random case of a random adapter among `targets` (its `Adapter.random_case`)."""
    from .adapters import get
    target = str(rng.choice(list(targets)))
    return get(target).random_case(rng, device, noises, iterations)


def shrink_candidates(case: Case):
    """Simpler variants of `case`, simplest first: its adapter's `Adapter.shrink_candidates`."""
    from .adapters import get
    return get(case.target).shrink_candidates(case)


