"""Drive a stand-in clone (or a copy of one) through its entry points, as docs/references.md §5 says a
user runs it, with minimal seams of this script's own; print what the loop did as JSON.

    python drive.py es-at-scale CLONE WORK [--iterations N] [--eval]
    python drive.py es-awd CLONE WORK [es.py flags...]
    python drive.py --batch JOBS.json      (several drives, one forked child each)

Independent of the parity child (oracles/): tests/test_standin_entry_points.py uses it to check that the
stand-ins behave as §5 describes (constructor, fit, parse_args, main, return shapes). Inert modules are
served for ray, vllm, transformers and wandb; each engine holds a two-tensor model whose reward is a
function of its current parameters, written into the completion text so that the loop's own grading
recovers it. Runs in its own process: it replaces modules in sys.modules.
"""
from __future__ import annotations

import inspect
import json
import os
import re
import signal
import sys
import types
from pathlib import Path

import torch

CALLS: list = []


class Inert:
    """Absorbs construction, calls and attributes."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs

    def __call__(self, *args, **kwargs):
        return Inert(*args, **kwargs)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Inert()


class SamplingParams:
    def __init__(self, n=1, **fields):
        self.n, self.fields = n, fields


class Tokenizer:
    def decode(self, ids, skip_special_tokens=False):
        CALLS.append(["decode", skip_special_tokens])
        return "".join(chr(i) for i in ids)


class WandbRun:
    def log(self, data, step=None):
        CALLS.append(["wandb.log", step])

    def finish(self):
        CALLS.append(["wandb.finish"])


def _wandb_init(**kwargs):
    CALLS.append(["wandb.init", sorted(kwargs)])
    return WandbRun()


def _module(name, **attrs):
    module = types.ModuleType(name)
    module.__path__ = []

    def inert_attribute(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Inert

    module.__getattr__ = inert_attribute
    for key, value in attrs.items():
        setattr(module, key, value)
    sys.modules[name] = module
    return module


def install_modules():
    _module("ray", init=lambda *a, **k: CALLS.append(["ray.init", k.get("address")]), get=lambda x, *a, **k: x,
            kill=lambda *a, **k: CALLS.append(["ray.kill"]), remote=lambda *a, **k: Inert())
    _module("ray.util", get_node_ip_address=lambda: "127.0.0.1")
    _module("ray.util.placement_group", placement_group=Inert,
            remove_placement_group=lambda *a: CALLS.append(["remove_placement_group"]))
    _module("ray.util.scheduling_strategies", PlacementGroupSchedulingStrategy=Inert)
    _module("vllm", LLM=type("LLM", (), {}), SamplingParams=SamplingParams)
    _module("vllm.utils")   # get_ip / get_open_port: inert here, replaced on the trainer module
    _module("vllm.distributed")
    _module("vllm.distributed.utils", StatelessProcessGroup=type("StatelessProcessGroup", (), {
        "create": staticmethod(lambda **k: CALLS.append(["StatelessProcessGroup.create", k]) or Inert())}))
    _module("vllm.distributed.device_communicators")
    _module("vllm.distributed.device_communicators.pynccl", PyNcclCommunicator=lambda pg, device=None: (
        CALLS.append(["PyNcclCommunicator", str(device)]) or Inert()))
    _module("transformers", AutoTokenizer=type("AutoTokenizer", (), {
        "from_pretrained": staticmethod(lambda *a, **k: Tokenizer())}))
    _module("wandb", init=_wandb_init)
    if not torch.cuda.is_available():
        torch.cuda.synchronize = lambda *a, **k: None


# ----------------------------------------------------------------- engines

NAMES = ("w", "b")


class Model:
    def __init__(self):
        gen = torch.Generator().manual_seed(0)
        self.tensors = [torch.randn(3, 2, generator=gen), torch.randn(2, generator=gen)]

    def named_parameters(self):
        yield from zip(NAMES, self.tensors)

    def parameters(self):
        yield from self.tensors

    def state_dict(self):
        return dict(zip(NAMES, self.tensors))


def reward(tensors, target: float) -> float:
    return -float(sum(((t.double() - target) ** 2).sum() for t in tensors))


class Completion:
    def __init__(self, text):
        self.text, self.token_ids = text, [ord(c) for c in text]


class Output:
    def __init__(self, prompt, text, n):
        self.prompt, self.outputs = prompt, [Completion(text) for _ in range(n)]


class Method:
    def __init__(self, fn):
        self.remote = fn


class Engine:
    def __init__(self, index, group, worker_cls):
        self.index, self.group, self.model = index, group, Model()
        self.ext = worker_cls()
        self.ext.model_runner = types.SimpleNamespace(model=self.model)
        self.ext.rank, self.ext.world_size, self.ext.local_rank, self.ext.device = 0, 1, 0, torch.device("cpu")
        self.collective_rpc = Method(self._rpc)
        self.generate = Method(self._generate)
        self.perturbed = None

    def _rpc(self, method, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        CALLS.append(["rpc", self.index, method, [a if isinstance(a, (int, float, str, bool, list)) else str(a)
                                                  for a in args], kwargs])
        if method == "broadcast_all_weights":
            with torch.no_grad():
                for mine, theirs in zip(self.model.tensors, self.group[args[0]].model.tensors):
                    mine.copy_(theirs)
            return True
        if method == "perturb_self_weights":
            self.perturbed = args[0]
        elif method == "restore_self_weights":
            self.perturbed = None
        return getattr(self.ext, method)(*args, **kwargs)

    def _generate(self, prompts, sampling_params, use_tqdm=True):
        outputs = []
        for prompt in prompts:
            target = float(re.search(r"<target=([^>]+)>", prompt).group(1))
            value = reward(self.model.tensors, target)
            CALLS.append(["generate", self.index, self.perturbed, value])
            outputs.append(Output(prompt, repr(value), getattr(sampling_params, "n", 1)))
        return outputs


class Pool:
    """Runs apply_async at once (docs/references.md §5.1: the seam on the trainer module)."""

    def __init__(self, processes=None):
        CALLS.append(["Pool", processes])

    def apply_async(self, fn, args=()):
        return types.SimpleNamespace(get=lambda timeout=None: fn(*args))


PROMPTS = [f"prompt {k} <target={t!r}>" for k, t in enumerate([0.5, -0.25, 1.0])]


def _saved(path):
    state = torch.load(path, weights_only=True)
    return {k: v.tolist() for k, v in state.items()}


# ----------------------------------------------------------------- es-at-scale

def drive_es_at_scale(clone: Path, work: Path, argv: list) -> dict:
    iterations = int(argv[argv.index("--iterations") + 1]) if "--iterations" in argv else 2
    sys.path.insert(0, str(clone))
    from es_at_scale.trainer import es_trainer
    from es_at_scale.utils.worker_extension import WorkerExtension
    engines: list = []
    engines.extend(Engine(j, engines, WorkerExtension) for j in range(2))
    es_trainer.Pool = Pool
    es_trainer.get_ip = lambda: "10.0.0.1"
    es_trainer.get_open_port = lambda: 29555
    # the precision it launches with: what fit passes, else launch_engines' own default (recorded, as es-awd's)
    own = inspect.signature(es_trainer.EvolutionStrategiesTrainer.launch_engines).parameters["precision"].default

    def launch_engines(self, num_engines=4, n_gpu_per_vllm_engine=1, model_name="", precision=own):
        CALLS.append(["launch_engines", num_engines, precision])
        return engines, []
    es_trainer.EvolutionStrategiesTrainer.launch_engines = launch_engines
    graded = []

    def reward_function(response_text, target):
        graded.append([response_text, target])
        return "ok", response_text   # a pair; the reward as text: the trainer's float() reads it

    os.environ["RAY_ADDRESS"] = "somewhere:6379"
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    trainer = es_trainer.EvolutionStrategiesTrainer(
        model_name="stand-in", checkpoint=None, sigma=0.01, alpha=0.5, population_size=3, reward_shaping="z-scores",
        num_iterations=iterations, max_tokens=8, batch_size=3, mini_batch_size=2, reward_function=reward_function,
        template_function=lambda prompt: f"T[{prompt}]", train_dataloader=[(PROMPTS, [0.5, -0.25, 1.0])],
        eval_dataloader_dict={"held-out": [(PROMPTS[:2], [0.5, -0.25])]} if "--eval" in argv else {},
        eval_freq=1, n_vllm_engines=2, n_gpu_per_vllm_engine=1, logging="none", use_gpus="",
        output_directory=str(work), save_best_models=False, experiment_name="run")
    installed = [signal.getsignal(signal.SIGINT) == trainer._handle_exit,
                 signal.getsignal(signal.SIGTERM) == trainer._handle_exit]
    signal.signal(signal.SIGINT, handlers[0])
    signal.signal(signal.SIGTERM, handlers[1])
    environment = {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
                   "RAY_ADDRESS": os.environ.get("RAY_ADDRESS")}
    trainer.fit()
    saved = sorted(str(p.relative_to(work)) for p in work.rglob("*") if p.is_file())
    final = [p for p in saved if p.endswith("pytorch_model.pth")]
    return {"calls": CALLS, "graded": graded, "handlers_installed": installed, "environment": environment,
            "logging_dir": trainer.logging_dir, "eval_batches": trainer.eval_batches, "files": saved,
            "final": _saved(work / final[0]) if final else None,
            "engine0": {k: v.tolist() for k, v in engines[0].model.state_dict().items()},
            "inter_engine_group": [type(e.ext.inter_engine_group).__name__ for e in engines]}


# ----------------------------------------------------------------- es-awd

def drive_es_awd(clone: Path, work: Path, argv: list) -> dict:
    sys.path.insert(0, str(clone))
    import es
    import distributed_utils
    engines: list = []
    es.get_data = lambda tokenizer: ([{"context": p, "target": t} for p, t in zip(PROMPTS, [0.5, -0.25, 1.0])],
                                     [{"context": PROMPTS[0], "target": 0.5}])
    es.evaluate_reward = lambda output_text, data: ({"reward": float(output_text), "reward_info": {
        "format_reward": 1.0, "answer_reward": float(output_text)}}, output_text)

    def launch_engines(num_engines, model_name, precision="bfloat16"):
        CALLS.append(["launch_engines", num_engines, precision])
        engines.extend(Engine(j, engines, distributed_utils.WorkerExtension) for j in range(num_engines))
        return engines, []

    es.launch_engines = launch_engines
    es.cleanup = lambda engines, pgs, wandb_run: CALLS.append(["cleanup", len(engines), type(wandb_run).__name__])
    sys.argv = ["es.py", *argv]
    args = es.parse_args()
    es.main(args)
    folders = [Path(args.experiment_dir) / args.run_name] if args.run_name else \
        list(Path(args.experiment_dir).iterdir())   # the name main made up
    assert len(folders) == 1, folders
    logging_dir = folders[0]
    records = [json.loads(p.read_text()) for p in sorted((logging_dir / "iteration_updates").glob("*.json"))]
    return {"calls": CALLS, "args": vars(args), "records": records, "logging_dir": str(logging_dir),
            "files": sorted(p.name for p in logging_dir.iterdir()),
            "args_json": json.loads((logging_dir / "args.json").read_text()),
            "final": _saved(logging_dir / "final_model_weights.pt"),
            "engine0": {k: v.tolist() for k, v in engines[0].model.state_dict().items()},
            "deterministic": torch.are_deterministic_algorithms_enabled(),
            "environment": {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "PYTHONHASHSEED")}}


def run_one(target: str, clone: str, work: str, rest: list):
    install_modules()
    drive = drive_es_at_scale if target == "es-at-scale" else drive_es_awd
    result = drive(Path(clone), Path(work), rest)
    Path(work, "drive.json").write_text(json.dumps(result, default=str))


def run_batch(jobs_file: str):
    """Every job of a JSON list [[target, clone, work, [args...]], ...] in a forked child, in order (torch is
    imported once; each child gets fresh modules). Each child ends as `python drive.py target clone work
    args...` would: its exit status in WORK.rc (0, 2 for a usage error argparse refused, 1 for an
    exception) and what it wrote to stderr (a traceback included) in WORK.stderr, beside WORK (whose files
    a drive lists); its stdout is this process's."""
    import gc
    import traceback
    # torch's heap, imported once here, is every child's too: frozen, the stand-ins' own gc.collect() calls
    # (the loops' cleanup) in each child skip it instead of walking it and copying its pages on write
    gc.collect()
    gc.freeze()
    for target, clone, work, rest in json.loads(Path(jobs_file).read_text()):
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                err = os.open(f"{work}.stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(err, 2)
                run_one(target, clone, work, rest)
                code = 0
            except SystemExit as stop:      # argparse's usage errors, as the interpreter would end on them
                code = stop.code if isinstance(stop.code, int) else (stop.code is not None)
                if not isinstance(stop.code, (int, type(None))):
                    print(stop.code, file=sys.stderr)
            except BaseException:  # noqa: BLE001 - reported to the parent through the files
                traceback.print_exc()
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    Path(f"{work}.rc").write_text(str(int(code)))
                finally:
                    os._exit(int(code))
        os.waitpid(pid, 0)


if __name__ == "__main__":
    if sys.argv[1] == "--batch":
        run_batch(sys.argv[2])
    else:
        target, clone, work, *rest = sys.argv[1:]
        run_one(target, clone, work, rest)
