"""The wrapper side of the protocol in Python: a frame loop and esverify's own trainer behind it.

`serve(handlers, capabilities)` reads request frames from stdin and writes
one reply frame per request to stdout until stdin closes (docs/PROTOCOL.md
§2-§3). A handler's exception becomes an ``ok: false`` reply carrying its
message: the wrapper never dies on a bad case. Logging goes to stderr
(stdout is reserved for frames).

`TRAINER_HANDLERS` implements every operation with the clean-room code
(`esverify.rng`, `esverify.es`), so ``python -m esverify.impl`` is the
reference wrapper that the tests and the benchmark drive end to end.
"""
from __future__ import annotations

import sys

import numpy as np

from . import wire
from .wire import Tensor, parse_f64, parse_hex

NAME = "esverify-clean-room"


def read_exact(stream, n: int) -> bytes | None:
    """n bytes from a binary stream, None at a clean end of stream before the first byte."""
    parts, got = [], 0
    while got < n:
        chunk = stream.read(n - got)
        if not chunk:
            if got == 0:
                return None
            raise EOFError(f"stream ended after {got} of {n} bytes")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def serve(handlers: dict, capabilities: dict, stdin=None, stdout=None) -> int:
    """Answer requests until stdin closes; returns the exit status (0, or 1 on a malformed frame)."""
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    while True:
        prefix = read_exact(stdin, wire.PREFIX.size)
        if prefix is None:
            return 0
        try:
            h, b = wire.parse_prefix(prefix)
            head = read_exact(stdin, h)
            payload = read_exact(stdin, b) if b else b""
            request = wire.decode(head, payload)
        except (wire.FrameError, EOFError) as exc:   # the channel is out of sync: nothing sane to answer
            print(f"esverify.impl: malformed request frame: {exc}", file=sys.stderr)
            return 1
        rid, op = request.get("id"), request.get("op")
        try:
            if op == "capabilities":
                reply = {"id": rid, "ok": True, "result": capabilities}
            elif op in handlers:
                reply = {"id": rid, "ok": True, "result": handlers[op](request.get("args") or {})}
            else:
                reply = {"id": rid, "ok": False, "error": f"unsupported operation {op!r}"}
        except Exception as exc:  # a refused case is a reply, never a crash of the wrapper
            reply = {"id": rid, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        for part in wire.encode_parts(reply):   # tensors are written from their own memory
            stdout.write(part)
        stdout.flush()


# -- the clean-room trainer's handlers ------------------------------------------
def _u64s(t: Tensor, what: str) -> np.ndarray:
    if not isinstance(t, Tensor) or t.dtype != "u64":
        raise ValueError(f"{what} must be a u64 tensor")
    return t.bits.reshape(-1).astype(np.uint64)


def _at(args):
    from .. import rng
    return {"outputs": Tensor.of(np.asarray(rng.at(parse_hex(args["seed"], "seed"),
                                                     _u64s(args["indices"], "indices")), dtype=np.uint64))}


def _member_seed(args):
    from .. import rng
    seed, it, pop = (parse_hex(args[k], k) for k in ("seed", "iteration", "population"))
    members = [int(m) for m in _u64s(args["members"], "members")]
    if args.get("antithetic"):
        members = [m - m % 2 for m in members]
    return {"member_seeds": Tensor.of(np.array([rng.member_seed(seed, it, pop, m) for m in members],
                                               dtype=np.uint64))}


def _stream_seed(args):
    from .. import rng
    ms = parse_hex(args["member_seed"], "member_seed")
    return {"stream_seeds": Tensor.of(np.array([rng.stream_seed(ms, int(s), args["scheme"])
                                                for s in _u64s(args["slots"], "slots")], dtype=np.uint64))}


def _gaussian(args, backend=None):
    from .. import rng
    values = rng.gaussian(parse_hex(args["seed"], "seed"), parse_hex(args["n"], "n"),
                          parse_hex(args["first"], "first"), args["mapping"], backend=backend)
    return {"values": Tensor.of(np.ascontiguousarray(values, dtype=np.float32))}


def config_from_wire(c: dict):
    """An esverify.es.Config from a wire config (ValueError naming a bad field)."""
    from ..es import Config
    fields = dict(c)
    for k in ("sigma", "alpha", "anchor_lambda"):
        fields[k] = parse_f64(c[k], k)
    fields["seed"] = parse_hex(c["seed"], "seed")
    known = set(Config.__dataclass_fields__)
    return Config(**{k: v for k, v in fields.items() if k in known})


def _trainer(args, backend=None, needs_anchor=False):
    """(trainer, tensors): a Trainer on the request's parameters at its iteration.

    With anchored decay on, the trainer is built on `anchor` (capturing it) and the
    parameters are then copied in: the trainer's documented resume path (docs/numerics.md §6).
    """
    from ..es import Trainer
    cfg = config_from_wire(args["config"])
    params = [p.to_torch() for p in args["params"]]
    if cfg.decay_on and needs_anchor:   # update and step decay towards the request's anchor
        if "anchor" not in args:
            raise ValueError("anchored decay is on: the request needs 'anchor'")
        tensors = [a.to_torch() for a in args["anchor"]]
        tr = Trainer(tensors, cfg, backend=backend)
        for t, p in zip(tensors, params):
            t.copy_(p)
    else:
        tensors = params
        tr = Trainer(tensors, cfg, backend=backend)
    tr.iteration = parse_hex(args["iteration"], "iteration") if "iteration" in args else 0
    return tr, tensors


def _params_out(tensors) -> list:
    return [Tensor.of(t) for t in tensors]


def _perturb(args, backend=None):
    tr, tensors = _trainer(args, backend=backend)
    tr.perturb(int(args["member"]))
    return {"params": _params_out(tensors)}


def _restore(args, backend=None):
    import torch
    tr, tensors = _trainer(args, backend=backend)
    member = tr._check_member(int(args["member"]))
    # the trainer's own restore, entered as if perturb(member) had just run: snapshot mode
    # needs the bytes perturb would have saved, which the request carries
    if tr.config.restore == "snapshot":
        if "snapshot" not in args:
            raise ValueError("restore 'snapshot' needs the request's 'snapshot' tensors")
        tr._snapshot = [s.to_torch() for s in args["snapshot"]]
    tr._active = member
    with torch.no_grad():
        tr.restore(member)
    return {"params": _params_out(tensors)}


def _update(args, backend=None):
    tr, tensors = _trainer(args, backend=backend, needs_anchor=True)
    stats = tr.update(args["rewards"].values().reshape(-1).astype(np.float64).tolist())
    return {"params": _params_out(tensors), "coefficients": Tensor.of(np.asarray(stats["coefficients"],
                                                                                  dtype=np.float64))}


def _step(args, backend=None):
    tr, tensors = _trainer(args, backend=backend, needs_anchor=True)
    rewards = args["rewards"].values().reshape(-1).astype(np.float64).tolist()
    if len(rewards) != tr.config.population:
        raise ValueError(f"rewards has {len(rewards)} entries, the population is {tr.config.population}")
    stats = tr.step(lambda member: rewards[member])
    return {"params": _params_out(tensors), "coefficients": Tensor.of(np.asarray(stats["coefficients"],
                                                                                  dtype=np.float64))}


def _shaping(args):
    from ..es import shape_rewards
    coeffs, stats = shape_rewards(args["rewards"].values().reshape(-1).astype(np.float64), args["shaping"])
    out = {"coefficients": Tensor.of(np.asarray(coeffs, dtype=np.float64))}
    if args["shaping"] == "zscore":   # numpy's mean and std (ddof 0), pinned by the shaping goldens
        out.update(mean=Tensor.of(np.array([stats["mean"]], dtype=np.float64)),
                   std=Tensor.of(np.array([stats["std"]], dtype=np.float64)))
    return out


def _decay(args):
    from ..es import apply_anchor_decay_
    cfg = config_from_wire(args["config"])
    params = [p.to_torch() for p in args["params"]]
    anchors = [a.to_torch() for a in args["anchor"]]
    apply_anchor_decay_(params, anchors, cfg.anchor_decay, cfg.anchor_lambda, cfg.alpha)
    return {"params": _params_out(params)}


def trainer_handlers(backend: str | None = None) -> dict:
    """op -> handler for the clean-room trainer; `backend` picks esverify.rng's noise backend."""
    return {"at": _at, "member_seed": _member_seed, "stream_seed": _stream_seed,
            "gaussian": lambda a: _gaussian(a, backend), "perturb": lambda a: _perturb(a, backend),
            "restore": lambda a: _restore(a, backend), "update": lambda a: _update(a, backend),
            "step": lambda a: _step(a, backend), "shaping": _shaping, "decay": _decay}


def wire_profiles() -> tuple:
    """The profiles a protocol v1 config can name (protocol.schema.json, config.profile): those marked `wire`."""
    from ..es.profiles import PROFILES
    return tuple(name for name, p in PROFILES.items() if p.wire)


def __getattr__(name):   # WIRE_PROFILES: read from the registry when asked (PEP 562), not at import
    if name == "WIRE_PROFILES":
        return wire_profiles()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def trainer_capabilities() -> dict:
    """What the clean-room trainer supports: every operation, mapping, dtype, profile and feature."""
    from .. import __version__
    from ..es.profiles import PROFILES
    from ..rng import CONTRACT_VERSION
    return {"protocol": wire.PROTOCOL_VERSION,
            "implementation": {"name": NAME, "version": __version__, "language": "python"},
            "contract_version": CONTRACT_VERSION,
            # protocol v1's wire config carries the `wire` profiles only (protocol.schema.json); a loop of
            # its own has no protocol op (docs/PROTOCOL.md §5), so it is not claimed
            "profiles": {name: p.version for name, p in PROFILES.items() if p.wire},
            "operations": ["at", "member_seed", "stream_seed", "gaussian", "perturb", "restore", "update",
                           "shaping", "decay", "step"],
            "mappings": ["poly32", "libm64"], "dtypes": ["f32", "f16", "bf16"], "schemes": ["iid", "correlated"],
            "shapings": ["zscore", "centered_ranks", "none"], "decays": ["l1", "l2"],
            "restores": ["regenerate", "snapshot"], "antithetic": True, "noise": "contract"}
