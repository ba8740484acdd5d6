"""Oracle driver for the ES fine-tuning skill page's sample (docs/references.md §7), run by path in the child.

Usage (by the runner only): `python driver.py --clone FOLDER --reply-fd N`. FOLDER holds
the sample as one module (a `.py` file that defines `es_train_loop` and the global `utilities`); each
command names the file (`module`, relative to FOLDER).

One op, `skill-loop`: `es_train_loop(model, tokenizer, params_init, reward_fn, generations=G,
population_size=N, sigma=s, lr=lr, seed_base=b, device="cpu")` of the module, with
- stand-in `transformers` while the module is imported (it loads a model at import:
  `from_pretrained` gives a stand-in model of two small tensors in the dtype asked for);
- a stand-in model of the case's parameter set (an nn.Module whose parameters the loop rebinds to
  views of its perturbed vector), `params_init` = `parameters_to_vector(model.parameters())` of it
  (what the module computes for its own model), and `reward_fn(model, tokenizer)` = the runner's
  reward of the model's parameters as they are at the call (f64);
- numpy's legacy `np.random.seed` / `np.random.randn` hooked (numpy_hook): under `contract` noise
  the seed the loop sets is the u64 member seed and randn returns its contract stream widened to
  f64; under `native` noise numpy's own MT19937 stream, only recorded.
The reply: `params_current` (the returned vector) as results, the model's parameters after the loop
(the sample leaves them at its last member's perturbation), the rewards handed out in call order,
the seeds set, the draws, `rewards_history` as returned (floats where it holds numbers). When the
loop raises, the error names the module's own line (file, line, the source text) so the parent can
say which defect of the sample stopped it. Never imported by esverify.
"""
from __future__ import annotations

import sys
import traceback
import types
from pathlib import Path

import torch

from child_server import ReferenceLoadError, StandInModel, load_set, reward, save_results, serve, syntax_error

import child_loops as loops
import numpy_hook
from loop_seams import Seams

_MODULES: dict = {}


def load_modules(clone):
    loops.start(clone, "skill-sample", manifest_key=False)   # coverage; no manifest entry (MIT sample)
    return {}


class _ImportModel(StandInModel):
    """What `from_pretrained` gives while the module is imported: two small tensors."""

    def __init__(self, dtype):
        super().__init__(["w", "b"], [torch.zeros(3, 2, dtype=dtype), torch.zeros(2, dtype=dtype)])

    def save_pretrained(self, *args, **kwargs):
        return None


def _from_pretrained(*args, torch_dtype=None, **kwargs):
    return _ImportModel(torch_dtype if isinstance(torch_dtype, torch.dtype) else torch.float32)


def _load(clone: Path, rel: str):
    """The sample module, imported once per file (its import-time model load uses the stand-ins)."""
    if (clone, rel) in _MODULES:   # per clone: a mutant catalog switches clones in one child
        return _MODULES[(clone, rel)]
    path = clone / rel
    if not path.is_file():
        raise ReferenceLoadError({"kind": "missing", "file": rel, "message": f"file missing: {rel}"})
    transformers = __import__("transformers")
    transformers.AutoModelForCausalLM = types.SimpleNamespace(from_pretrained=_from_pretrained)
    name = f"esverify_skill_sample_{len(_MODULES)}"
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    try:
        exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), module.__dict__)
    except SyntaxError as exc:
        raise syntax_error(exc, rel) from None
    except Exception as exc:  # noqa: BLE001 - the import-time failure is the row's error
        raise ReferenceLoadError({"kind": "import-error", "file": rel,
                                  "message": f"importing {rel} raised {type(exc).__name__}: {exc}"}) from None
    for needed in ("es_train_loop", "utilities"):
        if not hasattr(module, needed):
            raise ReferenceLoadError({"kind": "interface", "file": rel, "name": needed,
                                      "message": f"esverify could not drive this file: {rel} defines no "
                                                 f"{needed} (docs/references.md §7)"})
    _MODULES[(clone, rel)] = module
    return module


class SampleError(RuntimeError):
    """The sample raised: `info` names its own line, for the parent's verdict."""

    def __init__(self, info: dict):
        super().__init__(info["message"])
        self.info = info


def _where(exc: BaseException, path: Path) -> dict:
    """The innermost frame of `exc` in the sample's file: line number, function, source text."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == path]
    if not frames:
        return {}
    f = frames[-1]
    return {"line": f.lineno, "function": f.name, "code": (f.line or "").strip()}


def _plain(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return repr(value)[:200]


def op_skill_loop(case, modules):
    clone = loops.STATE["clone"]
    rel = case["module"]
    module = _load(clone, rel)
    names, tensors = load_set(case["set"], case["device"])
    model = StandInModel(names, tensors)
    params_init = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    target = float(case["reward_target"])
    rewards = []

    def reward_fn(m, tokenizer, *args, **kwargs):
        value = reward(list(m.parameters()), target)
        rewards.append(value)
        return value

    numpy_hook.HOOK.configure(case.get("noise", "contract"), "correlated", case["mapping"], case["backend"])
    out = Path(case["out"])
    with Seams():
        numpy_hook.HOOK.install()
        try:
            result = module.es_train_loop(model, getattr(module, "tokenizer", None), params_init, reward_fn,
                                          generations=int(case["generations"]), population_size=int(case["population"]),
                                          sigma=float(case["sigma"]), lr=float(case["lr"]),
                                          seed_base=int(case["seed_base"]), device=case["device"])
        except Exception as exc:  # noqa: BLE001 - the parent decides whether it is a defect of the sample
            where = _where(exc, clone / rel)
            at = f" at {rel}:{where['line']} ({where['code']})" if where else ""
            raise SampleError({"kind": type(exc).__name__, "file": rel, **where,
                               "message": f"{type(exc).__name__}: {exc}{at}",
                               "rewards_before": len(rewards)}) from exc
        finally:
            numpy_hook.HOOK.uninstall()
    try:
        params_current, history = result
    except (TypeError, ValueError):
        raise RuntimeError(f"es_train_loop returned {type(result).__name__}, not (params_current, "
                           "rewards_history) (docs/references.md §7)") from None
    if not isinstance(params_current, torch.Tensor):
        raise RuntimeError(f"es_train_loop returned params_current of type {type(params_current).__name__}, "
                           "not a tensor")
    final = out / "theirs-final.npz"
    save_results(final, [params_current.detach().reshape(-1)])
    left = out / "theirs-model-after.npz"
    save_results(left, [torch.nn.utils.parameters_to_vector(model.parameters()).detach()])
    hook = numpy_hook.HOOK
    tape = {"rewards": rewards, "seeds": hook.seeds, "draws": [list(d) for d in hook.draws],
            "history": [_plain(v) for v in (history if isinstance(history, (list, tuple)) else [history])],
            "model_after": str(left), "numpy_global_changed": True}
    return {"results": str(final), "tape": tape, "attribution": {"ok": True, "calls": []}}


def reset():
    numpy_hook.HOOK.uninstall()
    numpy_hook.HOOK.reset()


if __name__ == "__main__":
    import child_server
    child_server.AFTER_COMMAND.append(reset)
    serve("skill-sample", load_modules, loops.with_coverage({"skill-loop": op_skill_loop}), threads=1)
