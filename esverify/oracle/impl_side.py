"""`esverify parity --impl CMD`: an implementation under test as our side of a parity case.

A thin adapter between the runner and a protocol wrapper
(docs/PROTOCOL.md): `ImplSide.run` has the signature and result of
`esverify.oracle.ours.run`, so the runner's one hook swaps it in. What the
reference replays (the handle table of member seeds, the coefficients) is
still computed by `ours.run` on a copy of the parameters: those are the
contract's *inputs*, given identically to both sides (contract noise
only; a wrapper claiming torch's generator gets no native-noise cases).
The tensors compared with the reference come from the wrapper:

- zscore -> `shaping`; perturb -> `perturb`; restore -> `perturb` then
  `restore`; decay -> `decay`; update (mirrored, caching, decay
  variants) -> `update` with the z-scored coefficients as rewards and
  shaping `none`, exactly as our side does;
- loop -> per iteration and member `perturb`, the reward of the perturbed
  parameters (computed here, as for our side), `restore`; then `update`
  with z-score shaping. The rewards are compared with the reference's too.

A case needing something the wrapper does not claim is a row with status
`unsupported` (never a pass); a wrapper failure is an `error` row and the
wrapper is restarted for the next case (esverify.impl.client).
"""
from __future__ import annotations

import threading

import numpy as np

from ..impl import client
from ..impl.client import Unsupported   # one class: a case or vector the wrapper does not claim
from ..impl.wire import Tensor, f64_hex, u64_hex
from .rewards import NONFINITE
from . import ours as _ours


class ImplSide:
    """The wrapper behind `command` as parity's side; open() before the run, close() after."""

    def __init__(self, command, log_path=None, deadline_s: float = 120.0, env=None):
        self.command = command
        self.process = client.ImplProcess(command, log_path=log_path, deadline_s=deadline_s, env=env)
        self.caps: dict = {}
        # the runner works on both targets at once (one thread each), and the wrapper has one channel
        self._lock = threading.Lock()

    def open(self) -> str | None:
        """Start the wrapper; a one-line setup error or None."""
        try:
            self.caps = self.process.start()
        except client.ImplFailure as exc:
            self.process.kill()
            return f"--impl {self.command!r}: {exc}"
        return None

    def close(self) -> None:
        self.process.close()

    def describe(self) -> str:
        impl = self.caps.get("implementation", {})
        return (f"our side is --impl {self.command!r} ({impl.get('name')} {impl.get('version')}, wrapper log "
                f"{self.process.log_path}), not the clean-room trainer; contract noise")

    # -- the runner's hook ---------------------------------------------------------
    def run(self, case, names, tensors, anchor, seed: int, mapping: str, backend) -> "_ours.OursResult":
        """Like ours.run: the reference's command from ours.run, the result tensors from the wrapper.
        Thread-safe: one case at a time goes through the wrapper's single channel."""
        with self._lock:
            return self._run(case, names, tensors, anchor, seed, mapping, backend)

    def _run(self, case, names, tensors, anchor, seed: int, mapping: str, backend) -> "_ours.OursResult":
        if getattr(case, "noise", "contract") == "native":   # torch's generator is not in protocol v1
            raise Unsupported("unsupported by --impl: native noise (torch's own generator); protocol v1 "
                              "carries contract noise only")
        if getattr(case, "rewards", None) in NONFINITE:   # the rows of NaN and infinite rewards
            raise Unsupported(f"unsupported by --impl: {case.rewards} rewards; the protocol's update and shaping "
                              "take finite rewards (docs/PROTOCOL.md §4), as the trainer's own update does")
        initial = [t.detach().to("cpu").clone() for t in tensors]
        copies = [t.clone() for t in tensors]
        reference_inputs = _ours.run(case, names, copies, anchor, seed, mapping, backend)
        config = {"profile": case.target, "mapping": mapping, "scheme": case.scheme, "seed": u64_hex(seed),
                  "population": case.population, "sigma": f64_hex(case.sigma), "alpha": f64_hex(case.alpha),
                  "shaping": "none", "antithetic": False, "restore": "regenerate", "anchor_decay": "none",
                  "anchor_lambda": f64_hex(0.0)}
        params = [Tensor.of(t) for t in initial]
        rewards = None
        if case.op == "zscore":
            self._need(["shaping"], shapings=["zscore"])
            r = self._call("shaping", {"shaping": "zscore",
                                       "rewards": Tensor.of(_ours.case_rewards(seed, case.population, case.rewards))})
            out = [r["coefficients"].to_torch()]
        else:
            dtypes = sorted({p.dtype for p in params})
            if case.op in ("perturb", "restore"):
                self._need(["perturb", "restore"], config, dtypes)
                base = {"config": config, "params": params, "iteration": u64_hex(0), "member": _ours.PERTURB_MEMBER}
                result = self._params(self._call("perturb", base))
                if case.op == "restore":
                    result = self._params(self._call("restore", {**base, "params": result}))
            elif case.kind == "decay":
                config.update(anchor_decay=case.decay, anchor_lambda=f64_hex(case.lam))
                self._need(["decay"], config, dtypes, decays=[case.decay])
                result = self._params(self._call("decay", {"config": config, "params": params,
                                                           "anchor": [Tensor.of(a) for a in anchor]}))
            elif case.kind == "update":
                result = self._update(case, config, params, anchor, seed, dtypes)
            elif case.op == "loop":
                result, rewards = self._loop(case, config, params, dtypes)
            else:
                raise ValueError(f"unknown op {case.op!r}")
            out = [p.to_torch() for p in result]
        return _ours.OursResult([o.to(t.device) for o, t in zip(out, tensors)] if case.op != "zscore" else out,
                                reference_inputs.command, rewards=rewards)

    def _update(self, case, config, params, anchor, seed, dtypes):
        coeffs, _ = _ours.shape_rewards(_ours.case_rewards(seed, case.population, case.rewards), "zscore")
        config["antithetic"] = case.op == "mirrored"
        args = {"config": config, "params": params, "iteration": u64_hex(0), "rewards": Tensor.of(np.asarray(coeffs))}
        if case.decay != "none":
            config.update(anchor_decay=case.decay, anchor_lambda=f64_hex(case.lam))
            args["anchor"] = [Tensor.of(a) for a in anchor]
        self._need(["update"], config, dtypes, decays=[] if case.decay == "none" else [case.decay])
        return self._params(self._call("update", args))

    def _loop(self, case, config, params, dtypes):
        config["shaping"] = "zscore"
        self._need(["perturb", "restore", "update"], config, dtypes)
        rewards = []
        for it in range(case.extra.get("iterations", 3)):
            row = []
            for member in range(case.population):
                base = {"config": config, "iteration": u64_hex(it), "member": member}
                perturbed = self._params(self._call("perturb", {**base, "params": params}))
                row.append(_ours.reward([p.to_torch() for p in perturbed]))
                params = self._params(self._call("restore", {**base, "params": perturbed}))
            rewards.append(row)
            params = self._params(self._call("update", {"config": config, "params": params,
                                                        "iteration": u64_hex(it),
                                                        "rewards": Tensor.of(np.array(row, dtype=np.float64))}))
        return params, rewards

    # -- helpers -----------------------------------------------------------------------
    def _need(self, ops, config=None, dtypes=(), decays=(), shapings=()):
        features = {}
        if config is not None:
            features = {"profiles": [config["profile"]], "mappings": [config["mapping"]],
                        "schemes": [config["scheme"]], "shapings": [config["shaping"]],
                        "antithetic": config["antithetic"]}
        missing = client.missing_claims(self.caps, ops, **features, dtypes=list(dtypes), decays=list(decays))
        missing += client.missing_claims(self.caps, shapings=list(shapings))
        if missing:
            raise Unsupported("unsupported by --impl: needs " + ", ".join(missing))

    def _call(self, op: str, args: dict) -> dict:
        try:
            return self.process.call(op, args)
        except client.WrapperError as exc:
            raise RuntimeError(f"the wrapper replied to {op} with an error: {exc}") from None
        except client.ImplFailure as exc:
            raise RuntimeError(f"{op}: {exc.kind}: {exc}") from None

    @staticmethod
    def _params(result: dict) -> list:
        params = result.get("params")
        if not isinstance(params, list) or not all(isinstance(p, Tensor) for p in params):
            raise RuntimeError("the wrapper's reply has no list of params tensors")
        return params
