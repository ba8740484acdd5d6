"""One eggroll row: the trainer's `main` in the child, our `run_lowrank_loop`, compared bit for bit (docs/references.md §8).

Design record: both sides start from the same vLLM-named weights (made
here the way the driver makes them from `init_seed` / `init_std`) and
compute the same engine reward (`engine_reward`). The child runs first;
our side then runs the same settings. The comparison walks each step in
time order and stops at the first difference, which names itself: the
number of steps, each member's evaluated perturbation B·A (f16 bits per
weight), every reward (f64 bits), the pair differences the update
received (f32 bits), engine 0's weights after the update, every engine
holding the same bits after the step's synchronisation; then the number
of updates and the final weights. The adapter factors A and B are
compared too, but a difference there alone is a note, never a fail: the
sign of an odd member may sit on A or on B and give the same B·A.

A resume row runs the trainer twice: the first run stops at step 1 and
writes its checkpoint (save_freq -1: the last step only; the other runs
save none); the second resumes from it (the middle of an
adapter generation) and is compared with our loop started at that step
from our own weights after step 1.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from esverify.oracle.verdict import Outcome

from . import contract, lowrank, shapes, tape_arrays

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
#: the tiny model of the rows (the driver's default): hidden 4, intermediate 6, 2 heads, 1 KV head, head dim 2
TINY = {"layers": 1, "hidden": 4, "intermediate": 6, "heads": 2, "kv_heads": 1, "head_dim": 2, "vocab": 8}
#: one reward per prompt: the driver's default targets for prompt_batch_size 2
TARGETS = (0.5, -0.25)
RESUME_AT = 1   #: the step the first run of a resume row checkpoints (es_step 1; the resume starts at 2)
#: the contract u64 run seed of the contract rows (the native rows draw torch's generator from base_seed)
CONTRACT_SEED = 0x5EED
#: the initial weights: per vLLM tensor k, randn from a generator seeded INIT_SEED + k, times INIT_STD
INIT_SEED, INIT_STD = 11, 0.5


def _hexf(x) -> str:
    return float(x).hex()


def model(config=TINY) -> tuple[list, dict]:
    """(peft_shapes, vllm_shapes) of a driver model config."""
    return shapes.model_shapes(config["hidden"], config["intermediate"], config["heads"], config["kv_heads"],
                               config["head_dim"], config["layers"])


def initial_weights(vllm_shapes: dict, dtype: str, init_seed: int, init_std: float) -> dict:
    """The engine's initial weights as the driver makes them: tensor k (vLLM order) is torch.randn(shape) from a
    CPU generator seeded init_seed + k, in f32, times init_std (f32), rounded to `dtype`."""
    out = {}
    for k, (name, shape) in enumerate(vllm_shapes.items()):
        g = torch.Generator().manual_seed(int(init_seed) + k)
        out[name] = (torch.randn(shape, generator=g) * float(init_std)).to(DTYPES[dtype])
    return out


def engine_reward(peft_shapes, prompts):
    """The reward our loop gets, the engine's definition: every tensor widened to f64, each member's f16 B·A
    (widened) added once to its targeted slice, then per prompt target t -fsum((w - t)^2) over every element
    (one exactly rounded sum, no alpha / r scaling). Returns reward(es_step, member, weights, perturbations)."""
    slices = lowrank.slice_map(peft_shapes)

    def reward(step, member, weights, perturbations):
        w64 = {n: t.detach().to(torch.float64).clone() for n, t in weights.items()}
        for peft, ba in perturbations.items():
            t = slices[peft]
            w64[t.name][t.row_start:t.row_stop] += ba.to(torch.float64)
        flat = np.concatenate([t.numpy().reshape(-1) for t in w64.values()])
        out = []
        for target in prompts:
            d = flat - float(target)
            out.append(-math.fsum((d * d).tolist()))
        return out
    return reward


def update_chunks(rank: int, pairs: int, chunk_size=None) -> str:
    """How the update splits its pairs, in words ("5 pairs in 3 update chunks of 2"): the path a row reaches
    (docs/references.md §8, the update's chunks)."""
    chunk = lowrank.default_chunk(rank, pairs, chunk_size)
    count = -(-pairs // chunk)
    return f"{pairs} pairs in {count} update chunk{'s' if count > 1 else ''} of {chunk}"


def _bits16(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().view(torch.int16).numpy().view(np.uint16)


def _settings(tools, case) -> dict:
    x = case.extra
    return {"rank": int(x.get("rank", 1)), "engines": int(x.get("engines", 1)),
            "std": bool(x.get("normalize_with_std", False)), "scale_lr": bool(x.get("scale_lr_in_grad", False)),
            "spa": int(x.get("steps_per_adapter", 2)), "resume": bool(x.get("resume", False)),
            "base_seed": int(x.get("base_seed", 3)), "steps": case.iterations,
            "chunk": None if x.get("chunk_size") is None else int(x["chunk_size"]),
            # a non-finite reward population: the first prompt's target NaN or +inf (every member's reward on it)
            "targets": tools.with_nonfinite_target(TARGETS, x.get("rewards"))}


def _args(case, s, steps, **more) -> dict:
    return {"population_size": case.population, "num_iterations": steps, "lora_r": s["rank"],
            "steps_per_adapter": s["spa"], "sigma": case.sigma, "learning_rate": case.alpha,
            "base_seed": s["base_seed"], "normalize_with_std": s["std"], "scale_lr_in_grad": s["scale_lr"],
            "save_freq": None, **({} if s["chunk"] is None else {"es_update_chunk_size": s["chunk"]}), **more}


def compare_steps(tools, ours, tape, case, s, peft_shapes, names, source, first_step=0) -> tuple[str, list]:
    """(the first difference, '' when none; notes) between our LowRankRun and the driver's tape (tools: the
    session's RowTools, esverify.oracle.row_tools)."""
    notes = []
    steps = tape.get("steps") or []
    if [int(r["es_step"]) for r in steps] != list(ours.steps):
        return (f"the trainer ran es_steps {[r['es_step'] for r in steps]}, ours {list(ours.steps)}", notes)
    factor_diffs = []
    for i, (step, record) in enumerate(zip(ours.steps, steps)):
        g = step // s["spa"]
        if not record.get("adapters"):
            return f"es_step {step}: the trainer's engines served no adapters", notes
        arrays = tape_arrays.read(record["adapters"])
        for m in range(case.population):
            for l, (peft, (o, n_in)) in enumerate(peft_shapes):
                key = f"m{m}.l{l}.BA"
                if key not in arrays:
                    return f"es_step {step}: member {m} was never evaluated with an adapter for {peft}", notes
                mine = _bits16(ours.perturbations[g][m][peft])
                theirs = arrays[key]
                if mine.shape != theirs.shape or not np.array_equal(mine, theirs.astype(np.uint16)):
                    bad = int(np.count_nonzero(mine != theirs)) if mine.shape == theirs.shape else "shape"
                    return (f"es_step {step} member {m}: the evaluated perturbation B·A of {peft} differs "
                            f"({bad} of {mine.size} f16 elements)", notes)
                if not factor_diffs:
                    a, b = source(g, m // 2, l, s["rank"], o, n_in)
                    A, B = lowrank.adapter_factors(a, b, case.sigma, s["rank"], m)
                    if not (np.array_equal(_bits16(A), arrays[f"m{m}.l{l}.A"].astype(np.uint16))
                            and np.array_equal(_bits16(B), arrays[f"m{m}.l{l}.B"].astype(np.uint16))):
                        factor_diffs.append((step, m, peft))
        theirs_rewards = record.get("rewards") or []
        mine_rewards = [[_hexf(v) for v in row] for row in ours.rewards[i]]
        if theirs_rewards != mine_rewards:
            k = next((m for m, (a, b) in enumerate(zip(mine_rewards, theirs_rewards)) if a != b),
                     min(len(mine_rewards), len(theirs_rewards)))
            return (f"es_step {step} member {k}: rewards ours {mine_rewards[k] if k < len(mine_rewards) else None}, "
                    f"theirs {theirs_rewards[k] if k < len(theirs_rewards) else None}", notes)
        update = record.get("update")
        if not update:
            return f"es_step {step}: the trainer called no update", notes
        mine_d = [_hexf(v) for v in np.asarray(ours.differences[i], dtype=np.float32).astype(np.float64)]
        if update["pair_differences"] != mine_d:
            return (f"es_step {step}: pair differences ours {mine_d}, theirs {update['pair_differences']} (shaped "
                    f"fitnesses ours {[_hexf(v) for v in ours.shaped[i]]}, theirs {update['fitnesses']})", notes)
        if not update.get("engine0"):
            return f"es_step {step}: engine 0's update returned {update.get('returned')}", notes
        _, arrays, dtypes = tools.read_set(update["engine0"])
        cmp = tools.compare([ours.weights[i][n] for n in names], arrays, dtypes, names)
        if cmp.layout_error or cmp.mismatches:
            return f"es_step {step}: engine 0 after the update: {cmp.layout_error or cmp.summary()}", notes
        if record.get("engines_identical") is not True:
            return f"es_step {step}: the engines hold different weights after the step's synchronisation", notes
    if int(tape.get("updates", -1)) != ours.updates:
        return f"the trainer applied {tape.get('updates')} updates, ours {ours.updates}", notes
    if factor_diffs:
        step, m, peft = factor_diffs[0]
        notes.append(f"note: the adapter factors A, B differ from ours (first at es_step {step} member {m}, {peft}) "
                     "while B·A is the same bits (e.g. the odd member's sign on A instead of B)")
    return "", notes


def seed_overlap(base_seed: int, population: int, layers: int, generations: int) -> str:
    """The native seeds a run uses and how many of them a run with base_seed + 1 shares."""
    used = population // 2 * layers * generations
    return (f"this run's native generators are seeded {base_seed} .. {base_seed + used - 1} ({used} seeds: "
            f"{population // 2} pairs x {layers} weights x {generations} generations); a run with base_seed "
            f"{base_seed + 1} shares {used - 1} of them")


def _findings(case, tape, s, layers, generations) -> list:
    """[(key, observed)]: what the driver's static look at the trainer found, a failing engine add, the
    native seed streams the runs share, the f16 adapters beside the f32 update."""
    static = tape.get("static") or {}
    rel = "tasks.py"
    out = [("get-fitness-signature", f"{rel}:{hit['line']}: {hit['class']}.get_fitness({', '.join(hit['params'])})")
           for hit in static.get("three_argument_get_fitness") or []]
    out += [("tasks-import", f"{rel}:{hit['line']}: import {hit['module']}")
            for hit in static.get("tasks_unresolved_imports") or []]
    out += [("adapters-in-dev-shm", f"es_lora_multinode.py:{hit['line']}: {hit['code']}")
            for hit in static.get("dev_shm") or []]
    out += [("failing-add-skipped", f"es_lora_multinode.py:{hit['line']}: prints 'ERROR updating' and goes on")
            for hit in static.get("skipped_add") or []]
    if tape.get("failed_adds"):
        out.append(("failing-add-skipped", f"this run: {tape['failed_adds'][0]}"))
    if case.noise == "native":
        out.append(("shared-seed-streams", seed_overlap(s["base_seed"], case.population, layers, generations)))
    out.append(("f16-adapters-f32-update", f"dtype {case.dtype}, r = {s['rank']}: members evaluated with f16 A, "
                                           "B; the update draws f32 a, b"))
    return out


class _Row:
    """One eggroll row's settings and sides: the driver's command fields, our initial weights, our loop
    (run_lowrank_loop under the engine reward, as the trainer reads it) and the factors' noise source."""

    def __init__(self, session, case, ours_backend, child_backend):
        self.session, self.case, self.s = session, case, _settings(session.tools, case)
        self.peft_shapes, vllm_shapes = model()
        self.names = list(vllm_shapes)
        self.seed = CONTRACT_SEED if case.noise == "contract" else None
        self.backend = ours_backend if case.noise == "contract" else None
        self.base = {"case_id": case.case_id, "device": case.device, "dtype": case.dtype, "noise": case.noise,
                     "mapping": session.opts.mapping, "backend": child_backend, "engines": self.s["engines"],
                     "init_seed": INIT_SEED, "init_std": INIT_STD, "targets": list(self.s["targets"])}
        if self.seed is not None:
            self.base["seed"] = hex(self.seed)
        self.weights = initial_weights(vllm_shapes, case.dtype, INIT_SEED, INIT_STD)
        self.reward = engine_reward(self.peft_shapes, self.s["targets"])
        if case.extra.get("rewards") is not None:
            # the rewards as the trainer reads them: the engine answers with text the task parses, in which a
            # NaN keeps neither its sign nor its payload
            exact = self.reward

            def read(step, member, weights, perturbations):
                return [v if math.isfinite(v) else float(repr(v)) for v in exact(step, member, weights, perturbations)]
            self.reward = read

    def loop(self, start_weights, steps, start_step=0):
        """Our run of `steps` steps from `start_weights`: the row's initial weights (start_step 0) or our first
        run's at the checkpoint (a resume row), both fixed by the case; a catalog's variant clones run the same
        cases, so it runs once per case, steps and start step (Session.ours_once)."""
        return self.session.ours_once(self.case, lambda: self._loop(start_weights, steps, start_step),
                                      backend=self.backend, steps=steps, start_step=start_step)

    def _loop(self, start_weights, steps, start_step):
        case, s = self.case, self.s
        return lowrank.run_lowrank_loop(
            start_weights, self.peft_shapes, population=case.population, sigma=case.sigma, lr=case.alpha,
            rank=s["rank"], steps=steps, reward=self.reward, steps_per_adapter=s["spa"], normalize_with_std=s["std"],
            scale_lr_in_grad=s["scale_lr"], engines=s["engines"], noise=case.noise, base_seed=s["base_seed"],
            seed=self.seed, mapping=self.session.opts.mapping, backend=self.backend, start_step=start_step,
            chunk_size=s["chunk"], nonfinite=case.extra.get("rewards") is not None)

    def compared(self, ours, tape) -> tuple[str, list]:
        """compare_steps of our run and the driver's tape, the factors drawn from the row's noise."""
        case, s = self.case, self.s
        source = contract.factor_source(case.noise, s["base_seed"], case.population // 2, len(self.peft_shapes),
                                        self.seed, self.session.opts.mapping, self.backend)
        return compare_steps(self.session.tools, ours, tape, case, s, self.peft_shapes, self.names, source)


def run_row(session, case) -> Outcome:
    """The Outcome of one eggroll row (esverify.oracle.verdict judges it): the trainer's `main` in the child,
    our `run_lowrank_loop` beside it, compared step by step (a resume row: twice, from the checkpoint)."""
    row = _Row(session, case, *session.backend(case))
    s, out, notes = row.s, session.case_dir(case), []
    if s["resume"]:
        resumed = _resumed(row, out)
        if isinstance(resumed, Outcome):   # it differs before the checkpoint, or wrote none
            return resumed
        command, start_weights, start_step = resumed
        notes.append(f"resumed from the checkpoint of es_step {RESUME_AT}")
    else:
        command = {"op": "eggroll-main", **row.base, "out": str(out), "args": _args(case, s, s["steps"])}
        start_weights, start_step = row.weights, 0
    reply, ours = session.tools.exchange(case, command, lambda: row.loop(start_weights, s["steps"], start_step))
    tape = reply["tape"]
    diff, more = row.compared(ours, tape)
    notes += more
    _, final, final_dtypes = session.tools.read_set(reply["results"])
    last = ours.weights[-1] if ours.weights else start_weights
    cmp = session.tools.compare([last[n] for n in row.names], final, final_dtypes, row.names)
    if cmp.layout_error:   # nothing more to compare (verdict.reference_row: an error row)
        return Outcome(diff=diff, final=cmp)
    if cmp.mismatches and not diff:
        diff = f"final weights of engine 0: {cmp.summary()}"
    draws = tape.get("draws") or {}
    if draws.get("unexpected_count"):
        notes.append(f"{case.op}: {draws['unexpected_count']} unexpected draws (first {draws['unexpected'][:2]})")
    findings = [] if diff else _findings(case, tape, s, len(row.peft_shapes), -(-s["steps"] // s["spa"]))
    return Outcome(diff=diff, final=cmp, notes=notes, findings=findings,
                   keep=(row.names, [last[n] for n in row.names], reply["results"]),
                   ran=f"{s['steps']} steps, steps_per_adapter {s['spa']}, N={case.population}, r={s['rank']}, "
                       f"{s['engines']} engines, std {'on' if s['std'] else 'off'}, "
                       f"lr in grad {'on' if s['scale_lr'] else 'off'}, "
                       f"{update_chunks(s['rank'], case.population // 2, s['chunk'])}, "
                       f"{ours.updates} updates compared")


def _resumed(row: _Row, out) -> tuple | Outcome:
    """A resume row's first run, to the checkpoint of es_step RESUME_AT: (the resumed run's command, our
    weights and step it starts from), or the Outcome when the first run differs or wrote no checkpoint."""
    case, s = row.case, row.s
    first = {"op": "eggroll-main", **row.base, "out": str(out / "first"),
             "args": _args(case, s, RESUME_AT + 1, save_freq=-1)}
    reply, ours_first = row.session.tools.exchange(case, first, lambda: row.loop(row.weights, RESUME_AT + 1))
    diff, _ = row.compared(ours_first, reply["tape"])
    if diff:
        return Outcome(diff=f"before the checkpoint: {diff}")
    checkpoints = reply["tape"].get("checkpoints") or []
    if not checkpoints:
        return Outcome(diff=f"the trainer wrote no checkpoint at es_step {RESUME_AT} (save_freq -1 saves the last "
                            "step)")
    command = {"op": "eggroll-main", **row.base, "out": str(out / "resumed"),
               "args": _args(case, s, s["steps"], resume_from=checkpoints[-1])}
    return command, ours_first.weights[-1], RESUME_AT + 1
