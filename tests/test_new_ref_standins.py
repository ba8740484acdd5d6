"""The stand-ins of the two new references behave as docs/references.md §6 and §7 say, and their mutants
are what tests/standins/new_ref_mutants.py says they are.

Runs everything in-process with stand-in `transformers`, `accelerate` and `countdown_task` modules of
this file's own (installed in sys.modules for one test, then removed; the parity child brings its
own): a model of two tensors whose reward is a linear f64 function of its current parameters, so a
run's bits depend on every detail of the loop. Known answers come from slow re-statements of §6 and §7
written here (out-of-place tensor ops, numpy RandomState instead of the global generator), compared
bitwise (ulp distances in the failure message).
"""
from __future__ import annotations

import importlib.util
import itertools
import math
import py_compile
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from esverify.paths import oracles_dir
from standins.layouts import PAPER_SCRIPTS, paper_fork, scratch_run_folder
from standins.mutants import STANDINS, make_variant
from standins.new_ref_mutants import (EQUIVALENTS, PAPER, PAPER_DTYPES, PAPER_MUTANTS, SKILL, SKILL_DTYPES,
                                      SKILL_FILE, SKILL_MUTANTS, NewRefMutant)


def _load_drift():
    spec = importlib.util.spec_from_file_location("interface_drift_new_refs", oracles_dir() / "interface_drift.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


drift = _load_drift()
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
PRECISION = {"f32": "fp32", "f16": "fp16", "bf16": "bf16"}     # the scripts' --precision values
#: the reward's weights: one per element of the stand-in model (12 + 5)
WEIGHTS = torch.linspace(-1.0, 1.0, 17, dtype=torch.float64)
#: module constants the paper runs set after the import (sigma and alpha large enough that bf16 moves)
PAPER_CONSTANTS = {"NUM_ITERATIONS": 2, "POPULATION_SIZE": 4, "SIGMA": 0.05, "ALPHA": 0.02, "initial_seed": 7}
COUNTDOWN_ITEMS = [{"context": f"Using the numbers [{i}, 3], make {i + 3}.", "target": str(i + 3)} for i in range(5)]
DATA_SAMPLE = 3


# ----------------------------------------------------------------- stand-in modules

class TinyModel(torch.nn.Module):
    """Two tensors (3x4 and 5) of `dtype`, the same values for every instance."""

    def __init__(self, dtype=torch.float32):
        super().__init__()
        gen = torch.Generator().manual_seed(1234)
        self.weight = torch.nn.Parameter(torch.randn(3, 4, generator=gen).to(dtype), requires_grad=False)
        self.bias = torch.nn.Parameter((0.5 * torch.randn(5, generator=gen)).to(dtype), requires_grad=False)

    @property
    def device(self):
        return self.weight.device

    def save_pretrained(self, path):
        Path(path).mkdir(parents=True, exist_ok=True)
        torch.save({k: v.clone() for k, v in self.state_dict().items()}, Path(path) / "model.pt")


class Tokenizer:
    def save_pretrained(self, path):
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "tokenizer.json").write_text("{}")


def reward_of(model) -> float:
    """The f64 reward of the model's current parameters (in parameters() order)."""
    flat = torch.cat([p.detach().to(torch.float64).reshape(-1) for p in model.parameters()])
    return float(flat @ WEIGHTS)


def reward_of_vectors(tensors) -> float:
    return float(torch.cat([t.to(torch.float64).reshape(-1) for t in tensors]) @ WEIGHTS)


@pytest.fixture
def stand_in_modules(monkeypatch):
    """transformers (AutoModelForCausalLM, AutoTokenizer, utils.logging), accelerate and countdown_task;
    yields the list of from_pretrained calls. Also puts back numpy's global generator and allow_tf32."""
    calls = []

    class AutoModelForCausalLM:
        @staticmethod
        def from_pretrained(name, **kwargs):
            calls.append(("model", name, kwargs))
            return TinyModel(kwargs.get("torch_dtype", torch.float32))

    class AutoTokenizer:
        @staticmethod
        def from_pretrained(name, **kwargs):
            calls.append(("tokenizer", name, kwargs))
            return Tokenizer()

    class Accelerator:
        process_index, num_processes, is_main_process = 0, 1, True
        device = torch.device("cpu")

    transformers = types.ModuleType("transformers")
    utils = types.ModuleType("transformers.utils")
    logging = types.SimpleNamespace(set_verbosity_error=lambda: calls.append(("set_verbosity_error",)))
    utils.logging = logging
    transformers.utils = utils
    transformers.AutoModelForCausalLM, transformers.AutoTokenizer = AutoModelForCausalLM, AutoTokenizer
    accelerate = types.ModuleType("accelerate")
    accelerate.Accelerator = Accelerator
    countdown_task = types.ModuleType("countdown_task")
    countdown_task.reward_function = lambda *args, **kwargs: 0.0
    for name, module in [("transformers", transformers), ("transformers.utils", utils),
                         ("accelerate", accelerate), ("countdown_task", countdown_task)]:
        monkeypatch.setitem(sys.modules, name, module)
    # the scripts set allow_tf32 process-wide at import (cuBLASModule: monkeypatch cannot put it back)
    tf32, torch.backends.cuda.matmul.allow_tf32 = torch.backends.cuda.matmul.allow_tf32, False
    state = np.random.get_state()
    yield calls
    np.random.set_state(state)
    torch.backends.cuda.matmul.allow_tf32 = tf32


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ulps(a: torch.Tensor, b: torch.Tensor) -> str:
    """Largest ulp distance between two tensors of one dtype (via the ordered integer bit patterns)."""
    bits = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}[a.dtype]
    ia, ib = a.view(bits).to(torch.int64), b.view(bits).to(torch.int64)
    top = 1 << (8 * a.element_size() - 1)
    ia, ib = torch.where(ia < 0, -top - ia, ia), torch.where(ib < 0, -top - ib, ib)
    diff = (ia - ib).abs()
    return f"{int((diff > 0).sum())} of {diff.numel()} elements differ, at most {int(diff.max())} ulp"


def assert_bitwise(a: torch.Tensor, b: torch.Tensor):
    """Equal bit patterns (so -0.0 differs from 0.0 and NaNs compare by payload)."""
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)), _ulps(a, b)


# ----------------------------------------------------------------- the paper's scripts (§6)

def run_paper_script(tmp_path, monkeypatch, script, dtype, source=None, constants=PAPER_CONSTANTS, cleanup=True):
    """Run `script` (a path under archive/ of `source`) through main() in a scratch folder; returns
    (module, final state_dict, evaluate_model calls, folder). cleanup=False replaces the script's
    force_memory_cleanup by a no-op: its gc.collect() takes 0.2 s a call on a busy 2-core machine and
    changes no value, and the mutant runs call it 22 times a run. With cleanup, its collections walk only what
    the tests made: what the test process had imported is frozen (tests/conftest.py,
    pytest_collection_finish)."""
    folder = scratch_run_folder(tmp_path, script, COUNTDOWN_ITEMS, source=source)
    path = folder / Path(script).name
    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys, "argv", [str(path), "--model_name", "tiny/model", "--hf_cache_dir", str(tmp_path / "hf"),
                                      "--precision", PRECISION[dtype], "--gpu_threads", "2"]
                        + (["--data_sample", str(DATA_SAMPLE)] if "countdown" in script else []))
    module = _load(path, "paper_script_" + Path(script).stem.replace("-", "_"))
    for key, value in constants.items():
        setattr(module, key, value)
    evaluated = []

    def evaluate_model(model, tokenizer, input_text, target_text, accelerator, seed_idx=None, thread_id=None,
                       verbose=False, return_text=False):
        evaluated.append((seed_idx, thread_id, len(input_text), list(target_text)))
        return [reward_of(model)] * len(input_text)

    module.evaluate_model = evaluate_model
    if not cleanup:
        module.force_memory_cleanup = lambda: None
    module.main()
    saved = list(folder.glob("tiny/model_*_final"))
    assert len(saved) == 1, sorted(str(p) for p in folder.rglob("*"))
    state = torch.load(saved[0] / "model.pt", weights_only=True)
    return module, state, evaluated, saved[0]


def paper_reference(dtype, iid: bool, n_prompts: int, threads=2, constants=PAPER_CONSTANTS) -> dict:
    """docs/references.md §6 restated: the final parameters of copy 0, by name."""
    N, sigma, alpha = constants["POPULATION_SIZE"], constants["SIGMA"], constants["ALPHA"]
    copies = [dict(TinyModel(dtype).named_parameters()) for _ in range(threads)]
    copies = [{k: v.detach().clone() for k, v in c.items()} for c in copies]
    schedule = np.random.RandomState(constants["initial_seed"])

    def noise(p, seed, k):
        gen = torch.Generator().manual_seed(seed + (k if iid else 0))
        return torch.randn(p.shape, generator=gen, dtype=p.dtype)

    for _ in range(constants["NUM_ITERATIONS"]):
        seeds = [int(s) for s in schedule.randint(0, 2**30, size=N, dtype=np.int64)]
        rewards = np.zeros(N, dtype=np.float32)
        for start in range(0, N, threads):
            for j, i in enumerate(range(start, min(start + threads, N))):
                copy = copies[j]
                for k, name in enumerate(copy):
                    copy[name] = copy[name] + sigma * noise(copy[name], seeds[i], k)
                r = reward_of_vectors(copy.values())
                rewards[i] = np.float32(sum([r] * n_prompts) / n_prompts)
                for k, name in enumerate(copy):
                    copy[name] = copy[name] - sigma * noise(copy[name], seeds[i], k)
        z = (rewards - rewards.mean()) / (rewards.std() + np.float32(1e-8))
        assert z.dtype == np.float32
        for k, name in enumerate(copies[0]):
            p = copies[0][name]
            acc = torch.zeros_like(p)
            for i in range(N):
                acc = acc + noise(p, seeds[i], k) * float(z[i])
            copies[0][name] = p + alpha * (acc / N)
        copies = [copies[0]] + [dict(copies[0]) for _ in range(threads - 1)]
    return copies[0]


def test_the_scripts_at_import_bind_the_documented_interface(tmp_path, monkeypatch, stand_in_modules):
    folder = scratch_run_folder(tmp_path, PAPER_SCRIPTS[0])
    monkeypatch.setattr(sys, "argv", ["x.py"])
    module = _load(folder / "es_fine-tuning_countdown.py", "paper_import_check")
    assert torch.backends.cuda.matmul.allow_tf32 is True
    assert vars(module.args) == {"model_name": "Qwen/Qwen2.5-3B-Instruct", "hf_cache_dir": "hf_cache",
                                 "precision": "bf16", "gpu_threads": 4, "verbose": False, "data_sample": 1000}
    assert (module.NUM_ITERATIONS, module.POPULATION_SIZE, module.SIGMA, module.ALPHA, module.max_new_tokens,
            module.do_sample, module.initial_seed) == (500, 30, 0.001, 0.0005, 1024, False, 33)
    assert module.reward_function is sys.modules["countdown_task"].reward_function
    monkeypatch.setattr(sys, "argv", ["x.py", "--verbose"])
    concise = _load(STANDINS / PAPER / "archive/es_fine-tuning_conciseness.py", "paper_import_concise")
    assert vars(concise.args) == {"model_name": "Qwen/Qwen2.5-3B-Instruct", "hf_cache_dir": "huggingface_cache",
                                  "precision": "bf16", "gpu_threads": 4, "verbose": True}
    assert (concise.NUM_ITERATIONS, concise.max_new_tokens) == (1000, 100)
    assert all(len(pair) == 2 for pair in concise.dataset)
    assert concise.compute_reward("abcde", "ab") == -3 and concise.compute_reward("ab", "abcd") == -2


def test_countdown_without_its_data_file_raises_file_not_found(tmp_path, monkeypatch, stand_in_modules):
    root = paper_fork(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["x.py", "--precision", "fp32"])
    module = _load(root / "es_fine-tuning_countdown.py", "paper_no_data")
    with pytest.raises(FileNotFoundError, match="countdown.json"):
        module.main()


@pytest.mark.slow   # a paper script run whole, two iterations (--durations: 24-39 s each at load 17)
@pytest.mark.parametrize("script", PAPER_SCRIPTS)
def test_paper_main_runs_two_iterations_on_f32_and_matches_the_documented_loop(tmp_path, monkeypatch,
                                                                                 stand_in_modules, script):
    module, state, evaluated, saved = run_paper_script(tmp_path, monkeypatch, script, "f32")
    countdown = "countdown" in script
    n_prompts = DATA_SAMPLE if countdown else len(module.dataset)
    assert saved.name == ("model_es_random_seed7_pop4_iter2_sigma0.05_alpha0.02_fp32_threads2"
                          + (f"_question_num{DATA_SAMPLE}" if countdown else "") + "_final")
    assert (saved / "tokenizer.json").is_file()
    models = [c for c in stand_in_modules if c[0] == "model"]
    assert len(models) == 2 and all(c[2]["device_map"] == {"": 0} and c[2]["torch_dtype"] is torch.float32
                                    and c[2]["cache_dir"] == str(tmp_path / "hf") for c in models)
    # 2 iterations x 4 members, batches of 2 threads: member j of a batch on copy (thread) j (the threads of
    # a batch run concurrently: their order within the batch is not fixed)
    batches = [sorted(e[:3] for e in evaluated[b:b + 2]) for b in range(0, len(evaluated), 2)]
    assert batches == [[(0, 0, n_prompts), (1, 1, n_prompts)], [(2, 0, n_prompts), (3, 1, n_prompts)]] * 2
    if countdown:
        assert evaluated[0][3] == [item["target"] for item in COUNTDOWN_ITEMS[:DATA_SAMPLE]]
    expected = paper_reference(torch.float32, iid="iid" in script, n_prompts=n_prompts)
    assert list(state) == list(expected)
    for name in expected:
        assert_bitwise(state[name], expected[name])
    assert not torch.equal(state["weight"], TinyModel().weight.detach())     # the run moved the model


@pytest.mark.slow   # a paper script run whole, two iterations (--durations: 24-39 s each at load 17)
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_paper_main_matches_the_documented_loop_in_half_precision(tmp_path, monkeypatch, stand_in_modules, dtype):
    _, state, _, _ = run_paper_script(tmp_path, monkeypatch, PAPER_SCRIPTS[1], dtype)
    expected = paper_reference(DTYPES[dtype], iid=True, n_prompts=DATA_SAMPLE)
    for name in expected:
        assert_bitwise(state[name], expected[name])


def test_the_fork_layout_has_the_scripts_and_licence_at_its_root(tmp_path):
    root = paper_fork(tmp_path)
    assert sorted(p.name for p in root.iterdir()) == sorted(
        [Path(s).name for s in PAPER_SCRIPTS] + ["LICENSE.txt"])
    for script in PAPER_SCRIPTS:
        assert (root / Path(script).name).read_bytes() == (STANDINS / PAPER / script).read_bytes()
    edited = paper_fork(tmp_path / "edited", PAPER_MUTANTS["no-divide-by-population"].edits)
    assert "update.div_(POPULATION_SIZE)" not in (edited / "es_fine-tuning_countdown.py").read_text()


# ----------------------------------------------------------------- the skill page's sample (§7)

def load_skill(root: Path = STANDINS / SKILL, name="es_finetuning_skill_standin"):
    return _load(root / SKILL_FILE, name)


def run_skill(module, dtype, generations=2, population_size=4, **kwargs):
    """es_train_loop on a fresh model of `dtype`; returns (params, history, model, recorded member vectors)."""
    model = TinyModel(DTYPES[dtype])
    params_init = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    seen = []

    def reward_fn(model, tokenizer):
        seen.append(torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone())
        return reward_of(model)

    params, history = module.es_train_loop(model, None, params_init, reward_fn, generations=generations,
                                           population_size=population_size, device="cpu", **kwargs)
    return params, history, model, seen


def skill_reference(dtype, generations, N=4, sigma=0.017, lr=0.001, seed_base=42):
    """docs/references.md §7 restated: per generation the member vectors and the final vector."""
    p = torch.nn.utils.parameters_to_vector(TinyModel(dtype).parameters()).detach().clone()
    u = np.array([max(0.0, math.log(16.0) - math.log(k)) for k in range(1, 31)])   # math.log as the page
    u = u / u.sum()
    members = []
    for gen in range(generations):
        noises = [np.random.RandomState(seed_base + gen * N + m).randn(p.numel()) for m in range(N)]
        vectors = [p + sigma * torch.tensor(n, dtype=dtype) for n in noises]
        members.append(vectors)
        rewards = np.array([reward_of_vectors([v]) for v in vectors])
        z = (rewards - rewards.mean()) / (rewards.std() + 1e-8)
        acc = np.zeros(p.numel())
        for m in range(N):
            acc = acc + u[m] * noises[m] * z[m]
        p = p + (lr / sigma) * torch.tensor(acc, dtype=dtype)
    return members, p


def test_skill_module_binds_the_documented_globals(stand_in_modules):
    module = load_skill()
    assert (module.population_size, module.learning_rate, module.sigma) == (30, 0.001, 0.017)
    assert [c[0] for c in stand_in_modules] == ["model", "tokenizer"]
    assert stand_in_modules[0][2] == {"torch_dtype": torch.bfloat16, "device_map": "auto"}
    assert module.params_init.dtype == torch.bfloat16 and module.params_init.shape == (17,)
    assert_bitwise(module.params_init, torch.nn.utils.parameters_to_vector(TinyModel(torch.bfloat16).parameters()))
    u = module.utilities
    assert isinstance(u, np.ndarray) and u.dtype == np.float64 and u.shape == (30,)
    # log(16) - log(i + 1) > 0 for i < 15: 15 positive weights, strictly decreasing, then exact zeros
    assert (np.diff(u[:15]) < 0).all() and (u[15:] == 0).all() and abs(u.sum() - 1) < 1e-15


@pytest.mark.parametrize("dtype", SKILL_DTYPES)
def test_skill_loop_matches_the_documented_loop_and_keeps_its_defects(stand_in_modules, dtype):
    module = load_skill()
    params, history, model, seen = run_skill(module, dtype)
    members, expected = skill_reference(DTYPES[dtype], generations=2)
    assert_bitwise(params, expected)
    assert len(seen) == 8
    for got, want in zip(seen, itertools.chain(*members)):
        assert_bitwise(got, want)
    # rewards_history: the members' mean reward per generation, Python floats
    assert history == [float(np.mean([reward_of_vectors([v]) for v in gen])) for gen in members]
    assert all(type(h) is float for h in history)
    # the model is left at the last member's perturbation, not at the result
    left = torch.nn.utils.parameters_to_vector(model.parameters())
    assert_bitwise(left, members[-1][-1])
    assert not torch.equal(left, params)
    # the parameters are views of one perturbed vector
    assert model.weight.data.untyped_storage().data_ptr() == model.bias.data.untyped_storage().data_ptr()


def test_skill_loop_raises_type_error_on_bf16_at_the_first_member(stand_in_modules):
    module = load_skill()
    seen = []
    with pytest.raises(TypeError, match="Got unsupported ScalarType BFloat16"):
        module.es_train_loop(TinyModel(torch.bfloat16), None, module.params_init,
                             lambda m, t: seen.append(1) or 0.0, generations=2, population_size=4, device="cpu")
    assert seen == [1]


def test_skill_loop_raises_index_error_above_thirty_members(stand_in_modules):
    module = load_skill()
    seen = []
    model = TinyModel(torch.float32)
    params_init = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    with pytest.raises(IndexError, match="index 30 is out of bounds"):
        module.es_train_loop(model, None, params_init, lambda m, t: seen.append(1) or reward_of(m),
                             generations=1, population_size=40, device="cpu")
    assert len(seen) == 31


def test_skill_interface_is_the_documented_one():
    """No manifest entry for the page: its interface (docs/references.md §7) is written out here."""
    found = drift.extract(STANDINS / SKILL / SKILL_FILE,
                          names=("model_name", "population_size", "learning_rate", "sigma"))
    p = lambda *names, **defaults: ([{"name": n, "default": None} for n in names]
                                    + [{"name": k, "default": v} for k, v in defaults.items()])
    assert found == {
        "module_imports": [{"module": "torch", "as": "torch"}, {"module": "numpy", "as": "np"},
                           {"module": "math", "as": "math"},
                           {"from": "transformers", "name": "AutoModelForCausalLM", "as": "AutoModelForCausalLM"},
                           {"from": "transformers", "name": "AutoTokenizer", "as": "AutoTokenizer"}],
        "functions": {"compute_reward": p("model", "tokenizer", "examples"),
                      "is_correct": p("response", "expected"),
                      "es_train_loop": p("model", "tokenizer", "params_init", "reward_fn", generations="100",
                                         population_size="30", sigma="0.017", lr="0.001", seed_base="42",
                                         device="'cuda'"),
                      "save_finetuned_model": p("model", "params_final", "path")},
        "classes": {},
        "module_constants": {"model_name": "Qwen/Qwen2.5-0.5B-Instruct", "population_size": 30,
                             "learning_rate": 0.001, "sigma": 0.017}}
    assert (STANDINS / SKILL / "LICENSE").read_text().startswith("MIT License")


def test_save_finetuned_model_writes_the_vector_back(tmp_path, stand_in_modules):
    module = load_skill()
    model = TinyModel(torch.float32)
    params = torch.arange(17, dtype=torch.float32)
    module.save_finetuned_model(model, params, str(tmp_path / "out"))
    state = torch.load(tmp_path / "out" / "model.pt", weights_only=True)
    assert_bitwise(torch.cat([state["weight"].reshape(-1), state["bias"]]), params)


# ----------------------------------------------------------------- mutants (tests/standins/new_ref_mutants.py)

ALL = {**PAPER_MUTANTS, **SKILL_MUTANTS, **EQUIVALENTS}


def test_mutant_names_are_unique_and_targets_known():
    assert len(ALL) == len(PAPER_MUTANTS) + len(SKILL_MUTANTS) + len(EQUIVALENTS)
    assert {m.target for m in ALL.values()} == {PAPER, SKILL}
    assert all(set(m.shows) | set(m.maybe) <= set(PAPER_DTYPES if m.target == PAPER else SKILL_DTYPES)
               for m in ALL.values())


@pytest.mark.parametrize("name", sorted(ALL))
def test_each_mutant_applies_once_and_compiles(tmp_path, name):
    mutant: NewRefMutant = ALL[name]
    clone = make_variant(tmp_path, mutant.target, mutant.edits)
    for rel in {rel for rel, _, _ in mutant.edits}:
        assert (clone / rel).read_text() != (STANDINS / mutant.target / rel).read_text()
        py_compile.compile(str(clone / rel), cfile=str(tmp_path / "compiled.pyc"), doraise=True)
    assert mutant.what and mutant.reveals


_BASELINES: dict = {}


def _paper_bits(tmp_path, monkeypatch, script, dtype, source=None):
    _, state, _, _ = run_paper_script(tmp_path, monkeypatch, script, dtype, source=source, cleanup=False)
    return {k: v.view(torch.uint8).clone() for k, v in state.items()}


def _skill_bits(dtype, root=STANDINS / SKILL, name="es_finetuning_skill_standin"):
    params, history, model, _ = run_skill(load_skill(root, name), dtype)
    return {"params": params.view(torch.uint8).clone(),
            "left": torch.nn.utils.parameters_to_vector(model.parameters()).view(torch.uint8).clone(),
            "history": torch.tensor(history, dtype=torch.float64).view(torch.uint8)}


def _same(a: dict, b: dict) -> bool:
    return list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("name", sorted(ALL))
def test_each_mutant_shows_exactly_where_its_entry_says(tmp_path, monkeypatch, stand_in_modules, name):
    mutant: NewRefMutant = ALL[name]
    clone = make_variant(tmp_path / "clone", mutant.target, mutant.edits)
    differs = []
    if mutant.target == PAPER:
        (script,) = {rel for rel, _, _ in mutant.edits}
        for dtype in PAPER_DTYPES:
            key = (script, dtype)
            if key not in _BASELINES:
                _BASELINES[key] = _paper_bits(tmp_path / f"base-{dtype}", monkeypatch, script, dtype)
            if not _same(_paper_bits(tmp_path / f"mut-{dtype}", monkeypatch, script, dtype, source=clone),
                         _BASELINES[key]):
                differs.append(dtype)
    else:
        for dtype in SKILL_DTYPES:
            key = (SKILL, dtype)
            if key not in _BASELINES:
                _BASELINES[key] = _skill_bits(dtype)
            if not _same(_skill_bits(dtype, clone, "es_finetuning_skill_" + name.replace("-", "_")), _BASELINES[key]):
                differs.append(dtype)
    expected = () if name in EQUIVALENTS else mutant.shows
    differs = [dtype for dtype in differs if dtype not in mutant.maybe]
    assert tuple(differs) == tuple(expected), f"{name}: {mutant.what}"
