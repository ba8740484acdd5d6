"""Runs to replay in tests and benchmarks: an es-awd-style loop on the stand-in's own numerics, and a trainer run.

`awd_run` drives a tiny es-awd loop itself (docs/replay.md §3): E engines,
each a `WorkerExtension` of tests/standins/es-awd/distributed_utils.py
holding its own copy of a small parameter set; member k of the evaluated
members (every seed at +sigma, then at -sigma) is perturbed, scored and
restored on engine k mod E within each sign's pass (`batching="passes"`,
as es-awd's loop does; "members" counts k over the whole list); the update runs on
engine 0 (decay toward its pre-loop snapshot), then engine 0's weights are
copied to the others (the broadcast). It writes args.json,
iteration_updates/*.json and engine 0's final state_dict, as es-awd's loop
does. `trainer_run` is a clean-room trainer run with its run log.
"""
from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import numpy as np
import torch

STANDIN = Path(__file__).parent / "standins" / "es-awd"


class _Inert(types.ModuleType):
    """A stand-in module for a package the loop's imports name but the replay test never calls
    (vLLM, and Ray where it is absent): every attribute is an inert class, so `from x import Y`
    and `class Z(Y)` both work."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = type(name, (), {})
        setattr(self, name, value)
        return value


class _InertFinder:
    """Serves `_Inert` modules for the top-level packages in `roots` (a meta path finder)."""

    def __init__(self, roots):
        self.roots = tuple(roots)

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.roots:
            return importlib.util.spec_from_loader(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _Inert(spec.name)

    def exec_module(self, module):
        module.__path__ = []


def load_standin(folder: Path = STANDIN):
    """(weight_update_utils, WorkerExtension) of the es-awd stand-in in `folder`, loaded with inert vLLM
    modules (and inert Ray ones where Ray is absent); sys.modules and sys.meta_path are left as they were."""
    roots = ["vllm"]
    try:
        import ray  # noqa: F401
    except ImportError:
        roots.append("ray")
    before = dict(sys.modules)
    finder = _InertFinder(roots)
    sys.meta_path.insert(0, finder)
    try:
        mods = {}
        for name in ("weight_update_utils", "distributed_utils"):
            spec = importlib.util.spec_from_file_location(name, Path(folder) / f"{name}.py")
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            spec.loader.exec_module(mod)
            mods[name] = mod
        return mods["weight_update_utils"], mods["distributed_utils"].WorkerExtension
    finally:
        sys.meta_path.remove(finder)
        for k in set(sys.modules) - set(before):
            if k.split(".")[0] in roots + ["weight_update_utils", "distributed_utils"]:
                del sys.modules[k]
        for k in ("weight_update_utils", "distributed_utils"):
            if k in before:
                sys.modules[k] = before[k]


def base_weights(dtype=torch.float32, seed=0) -> dict:
    """A small parameter set: sizes around es-awd's 32-element tail block, a 0-dim-free mix of shapes."""
    g = torch.Generator().manual_seed(seed)
    shapes = {"w1": (33, 7), "b1": (7,), "w2": (7, 5), "emb": (64,)}
    return {k: torch.randn(s, generator=g).to(dtype) for k, s in shapes.items()}


class _Model(torch.nn.Module):
    def __init__(self, weights: dict):
        super().__init__()
        for k, v in weights.items():
            self.register_parameter(k, torch.nn.Parameter(v.clone(), requires_grad=False))


def _reward(model, target: float) -> float:
    return -float(sum(((p.float() - target) ** 2).sum() for p in model.parameters()))


def awd_run(folder: Path, *, dtype=torch.float32, engines=2, population=6, mirror=True, iterations=3,
            sigma=0.01, alpha=0.05, decay="none", lam=0.0, caching=False, global_seed=None,
            standin: Path = STANDIN, batching: str = "passes") -> dict:
    """Run the es-awd-style loop; returns paths {"base", "log", "final"} (base as safetensors)."""
    from safetensors.torch import save_file
    _, worker_cls = load_standin(standin)
    folder = Path(folder)
    log = folder / "log"
    (log / "iteration_updates").mkdir(parents=True)
    base = base_weights(dtype)
    save_file({k: v.contiguous() for k, v in base.items()}, folder / "base.safetensors")

    class Engine(worker_cls):
        def __init__(self):
            self.model_runner = types.SimpleNamespace(model=_Model(base))
    fleet = [Engine() for _ in range(engines)]
    args = {"model_name": "standin", "sigma": sigma, "alpha": alpha, "population_size": population,
            "num_iterations": iterations, "num_engines": engines, "global_seed": global_seed,
            "mirror_sampling": mirror, "caching": caching, "weight_decay_type": decay, "weight_decay_lambda": lam,
            "precision": {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype]}
    (log / "args.json").write_text(json.dumps(args))
    if decay != "none" and lam > 0:
        fleet[0].snapshot_weights_to_cpu()
    for i in range(1, iterations + 1):
        rng = np.random.default_rng((global_seed or 42) + i)
        seeds = [int(s) for s in rng.integers(0, 2 ** 30, size=population // 2 if mirror else population)]
        rewards = []
        members = [(seed, negate) for negate in ((False, True) if mirror else (False,)) for seed in seeds]
        for k, (seed, negate) in enumerate(members):
            # "members": member k of the whole list on engine k mod E; "passes": k counted within its sign's pass
            engine = fleet[(k if batching == "members" else k % len(seeds)) % engines]
            engine.perturb_self_weights(seed, sigma, caching, negate)
            rewards.append(_reward(engine.model_runner.model, 0.5))
            engine.restore_self_weights(seed, sigma, caching, negate)
        mean, std = np.mean(rewards), np.std(rewards)
        z = [(r - mean) / (std + 1e-8) for r in rewards]
        coeffs = [float(z[k] - z[k + len(seeds)]) for k in range(len(seeds))] if mirror else [float(c) for c in z]
        (log / "iteration_updates" / f"iteration_{i:06d}.json").write_text(
            json.dumps({"iteration": i, "seeds": seeds, "update_coefficients": coeffs}))
        fleet[0].update_weights_from_seeds(seeds, coeffs, alpha, population, caching, decay, lam)
        with torch.no_grad():                        # the broadcast: every engine takes engine 0's weights
            for other in fleet[1:]:
                for p, q in zip(other.model_runner.model.parameters(), fleet[0].model_runner.model.parameters()):
                    p.copy_(q)
    fleet[0].write_weights_to_disk(str(folder / "final_model_weights.pt"))
    return {"base": folder / "base.safetensors", "log": log, "final": folder / "final_model_weights.pt"}


def trainer_run(folder: Path, *, profile="es-at-scale", dtype=torch.float32, antithetic=True, iterations=3,
                population=6, decay="none", lam=0.0, noise="contract", scheme="correlated", sizes=None) -> dict:
    """A clean-room trainer run with its run log; returns paths {"base", "log", "final"}."""
    from safetensors.torch import save_file

    from esverify.es import Config, Trainer
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(1)
    sizes = sizes or {"w": (40, 3), "b": (37,), "c": (300,)}
    params = {k: torch.randn(s, generator=g).to(dtype) for k, s in sizes.items()}
    save_file({k: v.clone() for k, v in params.items()}, folder / "base.safetensors")
    cfg = Config(sigma=0.05, population=population, antithetic=antithetic, profile=profile, anchor_decay=decay,
                 anchor_lambda=lam, seed=7, scheme=scheme)
    trainer = Trainer(list(params.items()), cfg, run_log=folder / "log", noise=noise)
    for _ in range(iterations):
        trainer.step(lambda m: -float(sum(((p.float() - 1) ** 2).sum() for p in params.values())))
    torch.save({k: v.clone() for k, v in params.items()}, folder / "final.pt")
    return {"base": folder / "base.safetensors", "log": folder / "log", "final": folder / "final.pt"}
