"""The end-to-end loop row of hyperscale-es (op `loop-e2e`): the clone's own test, replayed update by update
(docs/hyperscale.md §13).

Design record: the child (child/hyperscale_e2e.py) runs the clone's `tests/end_to_end_test.py` unmodified,
with a scratch HF_HOME, and records each jitted step's inputs and outputs; this row replays every update
with our numpy model (.loop_e2e) from the reference's own shaped fitnesses and parameters before it (our
adamw state runs on from our previous update) and compares the parameters after each update, leaf by
leaf, bit for bit (session.tools.compare: the core judges). The noise is JAX's own (native): the test's
keys are its own, so the row runs in the native-noise f32 cell only.

Shaping is compared only where our model holds for the jitted `convert_fitnesses`: with
`--xla_cpu_enable_platform_dependent_math=false` in XLA_FLAGS (otherwise XLA's approximate reciprocal
square root, not modelled: the row says how many shaped values differ from the eager model, and the
update uses the reference's). The row's notes carry the final parameters' SHA-256[:16] (raw f32 bytes
in flatten order), checked against the golden G4 only on a clone at b77f7d6 with jax/jaxlib 0.10.2, FMA
and no XLA flags; the findings: the compilation cache the test wrote under HF_HOME, frozen noise (an
eager probe of thread 0 at the first and last epochs), the trace-time print.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from esverify.oracle.verdict import NotDriven, Outcome, OursRaised

from . import loop_e2e as L
from . import shaping as S
from .rows import host_fma, settings

F32 = np.float32
#: the golden of the real test's final parameters (docs/hyperscale.md §6, G4) and where it holds
G4 = "8f4b18a77ee205ad"
G4_COMMIT, G4_JAX = "b77f7d6", "0.10.2"
EXACT_SHAPING = L.EXACT_MATH       # a true square root in the jitted shaping (and sequential dots)
TEST = Path("tests") / "end_to_end_test.py"


def _f32(hexes, shape) -> np.ndarray:
    return np.array([int(h, 16) for h in hexes], np.uint32).view(F32).reshape(tuple(shape))


def _bits(hexes, shape) -> np.ndarray:
    return np.array([int(h, 16) for h in hexes], np.uint32).reshape(tuple(shape))


def final_hash(leaves) -> str:
    """SHA-256[:16] of the leaves' raw f32 bytes, concatenated in flatten order."""
    return hashlib.sha256(b"".join(np.ascontiguousarray(a, F32).tobytes() for a in leaves)).hexdigest()[:16]


def _ulps(ours: np.ndarray, bits: np.ndarray) -> np.ndarray:
    """Distance in units in the last place between f32 values (ordered integer form of the bit patterns)."""
    def ordered(u):
        u = u.astype(np.int64)
        return np.where(u & 0x80000000, 0x80000000 - u, u)
    return np.abs(ordered(np.ascontiguousarray(ours, F32).view(np.uint32)) - ordered(bits))


def _g4(session, digest: str) -> tuple[str, str]:
    """(note, difference) of the G4 check: it applies only to a clone at b77f7d6 on jax/jaxlib 0.10.2 with
    FMA and no XLA flags."""
    from esverify import gitinfo
    env = session.environment
    commit, _ = gitinfo.commit_and_dirty(Path(session.clone_path))
    where = (f"clone {str(commit)[:7] if commit else 'without a git commit'}, jax {env.get('jax')}, jaxlib "
             f"{env.get('jaxlib')}, FMA {env.get('cpu_fma')}, XLA_FLAGS '{env.get('XLA_FLAGS', '')}'")
    applies = (bool(commit) and commit.startswith(G4_COMMIT) and env.get("jax") == G4_JAX
               and env.get("jaxlib") == G4_JAX and env.get("cpu_fma") is True and not env.get("XLA_FLAGS"))
    if not applies:
        return (f"final parameters SHA-256[:16] {digest}; the golden G4 ({G4}) does not apply here ({where}: it "
                f"holds for {G4_COMMIT}, jax/jaxlib {G4_JAX}, FMA, no XLA flags)"), ""
    if digest == G4:
        return f"final parameters SHA-256[:16] {digest} = G4", ""
    return f"final parameters SHA-256[:16] {digest}", f"G4: final parameters SHA-256[:16] {digest}, golden {G4}"


def _findings(reply: dict) -> list:
    found = []
    files = reply["cache_files"]
    if files:
        found.append(("compilation-cache", f"the end-to-end test wrote {len(files)} compiled programs under "
                                           f"HF_HOME/{Path(files[0]).parts[0]} (a scratch HF_HOME here)"))
    probe, reuse = reply.get("frozen"), reply["init"][0].get("options", {}).get("noise_reuse", 0)
    if probe and probe["identical"] and not reuse:
        found.append(("frozen-noise", f"end-to-end test (noise_reuse 0): thread 0's perturbation of "
                                      f"{probe['leaf']} is bit-identical at epochs {probe['epochs'][0]} and "
                                      f"{probe['epochs'][1]}"))
    prints = sum("LORA UPDATE" in line for line in reply["printed"])
    if prints:
        found.append(("trace-print", f"end-to-end test: {prints} 'LORA UPDATE' lines in "
                                     f"{len(reply['updates'])} jitted updates"))
    return found


def _shaping(reply: dict, exact: bool):
    """(ours, theirs bits, names) of the shaping comparison when modelled, and a note on it."""
    pairs = [(_f32(s["raw"], (-1,)), _bits(s["shaped"], (-1,))) for s in reply["shapings"]]
    ours = [S.convert_fitnesses(raw, 0) for raw, _ in pairs]
    if exact:
        return ours, [b for _, b in pairs], [f"update{u}/shaped" for u in range(len(pairs))], \
            "jitted convert_fitnesses compared (a true square root under the flag)"
    differ = sum(int(np.sum(o.view(np.uint32) != b)) for o, (_, b) in zip(ours, pairs))
    return [], [], [], (f"jitted convert_fitnesses not compared (XLA's approximate rsqrt, not modelled): "
                        f"{differ} of {sum(b.size for _, b in pairs)} shaped values differ from the eager model; "
                        f"the updates replay the reference's shaped values")


def _per_update(ours: list, theirs: list, n_leaves: int) -> str:
    """Per update: mismatching elements and the largest ulp distance over its leaves."""
    parts = []
    for u in range(len(ours) // n_leaves):
        sl = slice(u * n_leaves, (u + 1) * n_leaves)
        d = [_ulps(o, t) for o, t in zip(ours[sl], theirs[sl])]
        parts.append(f"{u}:{sum(int(np.count_nonzero(x)) for x in d)}/{max(int(x.max()) for x in d)}")
    return "mismatches/max ulp per update " + " ".join(parts)


def e2e_row(session, case) -> Outcome:
    """Run the clone's end-to-end test in the child and replay each of its updates (module docstring)."""
    if not (Path(session.clone_path) / TEST).is_file():
        raise NotDriven(f"the clone has no {TEST.as_posix()}")
    reply = session.tools.exchange(case, {"op": "run", "case_id": case.case_id, "ops": [{"op": "loop-e2e"}]})[0]
    reply = reply["results"][0]
    if not reply["updates"] or not reply["init"]:
        raise NotDriven(f"the end-to-end test ran ({reply['ran']}) without an init_noiser and do_updates call")
    init, layout, updates = reply["init"][0], reply["layout"], reply["updates"]
    shapes = layout["shapes"]
    env = session.environment
    flags = str(env.get("XLA_FLAGS", ""))
    befores = [[_f32(h, s) for h, s in zip(u["before"], shapes)] for u in updates]
    shaped = [_f32(u["shaped"], (-1,)) for u in updates]
    try:
        ours_after = L.replay(init, layout, befores, [u["keys"] for u in updates], shaped,
                              [u["epochs"][0] for u in updates], host_fma(env), flags)
    except ValueError as exc:
        raise OursRaised(exc, "the end-to-end test's updates: ") from None
    ours, theirs, names = [], [], []
    for u, (mine, rec) in enumerate(zip(ours_after, updates)):
        ours += mine
        theirs += [_bits(h, s) for h, s in zip(rec["after"], shapes)]
        names += [f"update{u}{name}" for name in layout["names"]]
    per_update = _per_update(ours, theirs, len(shapes))
    s_ours, s_theirs, s_names, s_note = _shaping(reply, EXACT_SHAPING in flags.split())
    cmp = session.tools.compare(ours + s_ours, theirs + s_theirs, ["f32"] * (len(ours) + len(s_ours)),
                                names + s_names)
    note, g4_diff = _g4(session, final_hash([t.view(F32) for t in theirs[-len(shapes):]]))
    epochs = sorted({e for u in updates for e in u["epochs"]})
    ran = (f"tests/end_to_end_test.py ({reply['ran']}): {len(updates)} jitted updates (epochs {epochs[0]}-"
           f"{epochs[-1]}), {init['noiser']} rank {init['options'].get('rank', 1)}, sigma {init['sigma']}, "
           f"lr {init['lr']}, {init['solver']} {init['solver_kwargs']}, N={updates[0]['threads']}, "
           f"{len(shapes)} leaves {shapes}, native noise; {per_update}; {s_note}; {settings(env)}")
    return Outcome(diff=g4_diff or cmp.summary(), final=cmp, notes=[note], ran=ran, findings=_findings(reply))
