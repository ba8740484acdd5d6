"""Golden vectors through a wrapper: the implementation under test as one more gate backend.

`ImplTarget(command)` starts the wrapper (`open()`), and `as_area(area)`
gives the gate an Area whose only backend is ``impl:<name>`` and whose
`recompute` turns one golden vector into protocol requests
(docs/PROTOCOL.md §5):

- rng ``splitmix64-*`` -> `at`; ``member-seed`` -> `member_seed`;
  ``stream-seed`` -> `stream_seed`; ``gaussian`` -> `gaussian`; ``noise``
  -> `member_seed`, `stream_seed` and one `gaussian` per slot;
- rng ``gaussian-digest`` -> one `gaussian_ranges` (the bulk request) whose
  reply the gate hashes; ``noise-digest`` -> `member_seed`, `stream_seed`,
  then one `gaussian_ranges`; a differing digest is located by asking
  `gaussian_ranges` again for sub-ranges (esverify.goldens.digest). A
  wrapper that claims `gaussian` and not the bulk request is asked the same
  ranges through `gaussian`, one request per range (docs/PROTOCOL.md §4
  defines the two as equal), so that no port skips the digests;
- es ``es-run`` -> per iteration `perturb`, `restore`, `update`, chained on
  the implementation's own results (as a trainer would run).

A vector needing an operation, mapping, dtype, scheme, shaping, decay,
restore mode, antithetic pairs or profile the wrapper did not claim raises
`Unsupported` (a row with status ``unsupported``, never a pass). A
wrapper that times out, dies or breaks the framing raises `CaseError`
(an ``error`` row); the client restarts it for the next vector.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .. import bits
from ..impl import client
from ..impl.client import UNSUPPORTED, Unsupported
from ..impl.wire import Tensor, u64_hex
from .compare import decode, libm_allowance, row

OPERATIONS = ("at", "member_seed", "stream_seed", "gaussian", "gaussian_ranges", "perturb", "restore", "update", "shaping", "decay",
              "step")
_UINT = {"f32": np.uint32, "f16": np.uint16, "bf16": np.uint16, "f64": np.uint64, "u64": np.uint64}


class ShapeMismatch(Exception):
    """A reply tensor whose shape is not the vector's (status `mismatch`; docs/PROTOCOL.md §2, exact shapes)."""
    status = "mismatch"

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


class CaseError(Exception):
    """No usable reply for this vector (status `error`); the detail says which request and why."""
    status = "error"

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


def _bits(array: dict) -> Tensor:
    """A golden bit array as a wire tensor."""
    return Tensor(array["format"], decode(array).astype(_UINT[array["format"]]))


def _golden(t: Tensor, what: str, shape=None) -> dict:
    """A wire tensor as a golden bit array (flattened, row-major).

    shape: the shape the vector asks for (a tuple; None: already checked by the caller). A reply of
    another shape (a scalar as [1], a row as a column) raises ShapeMismatch naming both shapes.
    """
    if not isinstance(t, Tensor):
        raise CaseError(f"the reply's {what} is not a tensor")
    if shape is not None:
        check_shape(t, tuple(shape), what)
    return {"format": t.dtype, "values": [bits.to_hex(v, t.dtype) for v in t.bits.reshape(-1).tolist()]}


def check_shape(t: Tensor, shape: tuple, what: str) -> None:
    """ShapeMismatch unless the reply tensor `t` has exactly `shape` (no reshaping: [] is not [1])."""
    if tuple(t.shape) != tuple(shape):
        raise ShapeMismatch(f"{what}: the reply's tensor has shape {list(t.shape)}, the vector's shape is "
                            f"{list(shape)} (shapes must be exact, docs/PROTOCOL.md §2)")


def _u64_tensor(values) -> Tensor:
    return Tensor("u64", np.array([int(v) for v in values], dtype=np.uint64))


def _wire_config(c: dict) -> dict:
    """A golden (es area) config as a wire config: f64 scalars as bit patterns, no chunk hint."""
    out = {}
    for k in ("profile", "mapping", "scheme", "population", "shaping", "antithetic", "restore", "anchor_decay"):
        out[k] = c[k]
    out["seed"] = c["seed"]
    for k in ("sigma", "alpha", "anchor_lambda"):
        out[k] = c[k]["values"][0]
    return out


class ImplTarget:
    """The implementation under test behind `command`, for the goldens gate (see the module docstring)."""

    def __init__(self, command, log_path=None, deadline_s: float = client.DEFAULT_DEADLINE_S,
                 start_deadline_s: float = client.START_DEADLINE_S, env=None, require=()):
        unknown = [op for op in require if op not in OPERATIONS]
        if unknown:
            raise ValueError(f"--require: unknown operation(s) {unknown}; known: {list(OPERATIONS)}")
        self.command = command
        self.require = list(require)
        self.process = client.ImplProcess(command, log_path=log_path, deadline_s=deadline_s,
                                          start_deadline_s=start_deadline_s, env=env)
        self.caps: dict | None = None

    # -- lifecycle -------------------------------------------------------------
    def open(self) -> str | None:
        """Start the wrapper and read its capabilities; a one-line setup error, or None."""
        try:
            self.caps = self.process.start()
        except client.ImplFailure as exc:
            self.process.kill()
            tail = "" if str(self.process.log_path) in str(exc) else f" (wrapper stderr: {self.process.log_path})"
            return f"--impl {self.command!r}: {exc}{tail}"
        return None

    def close(self) -> None:
        self.process.close()

    @property
    def label(self) -> str:
        impl = (self.caps or {}).get("implementation", {})
        return f"impl:{impl.get('name', '?')}"

    def identity(self) -> dict:
        impl = (self.caps or {}).get("implementation", {})
        return {"command": self.command, "name": impl.get("name"), "version": impl.get("version"),
                "contract_version": (self.caps or {}).get("contract_version"), "log": str(self.process.log_path),
                "restarts": self.process.restarts}

    def requirement_rows(self) -> list[dict]:
        """One failing (`error`) row per operation of `require` that the wrapper does not claim."""
        ops = set((self.caps or {}).get("operations", []))
        return [row("*", self.label, "*", "capability", status="error",
                    detail=f"--require {op}: the wrapper does not claim operation {op!r}")
                for op in self.require if op not in ops]

    # -- the gate's view ---------------------------------------------------------
    def as_area(self, area):
        """`area` with one backend (this implementation) and recompute through the protocol.

        Its version is the one the wrapper claims for the area (the RNG contract
        version for `rng`, the profile's version for es areas), so the gate's
        file-version check compares the golden file with the implementation.
        """
        caps = self.caps or {}
        if area.name == "rng":
            version, const = caps.get("contract_version"), "capabilities.contract_version"
        else:
            version = caps.get("profiles", {}).get(area.name, area.version)
            const = f"capabilities.profiles[{area.name!r}]"
        trace = None if area.libm_trace is None else (lambda vector, backend: self.libm_trace(vector))
        locate = None if area.locate is None else (lambda vector, backend, got: self.locate(area.name, vector, got))
        return dataclasses.replace(area, version=version, version_constant=f"{const} of {self.label}",
                                   backends=lambda: [self.label],
                                   recompute=lambda vector, backend: self.recompute(vector), libm_trace=trace,
                                   locate=locate)

    def libm_trace(self, vector: dict) -> set:
        """The es vector's (field, element) pairs downstream of a libm64 value the wrapper's own
        `gaussian` gives differently from the reference (esverify.goldens.es_area.trace_libm); empty
        (every one-ulp difference a mismatch) when the wrapper does not claim gaussian with libm64."""
        from .es_area import trace_libm
        if client.missing_claims(self.caps, ["gaussian"], mappings=["libm64"]):
            return set()

        def draw(seed: int, numel: int):
            r = self._call("gaussian", {"mapping": "libm64", "seed": u64_hex(seed), "first": u64_hex(0),
                                        "n": u64_hex(numel)})
            return np.asarray(self._field(r, "values", "gaussian").bits, dtype=np.uint32).view(np.float32)
        try:
            return trace_libm(vector, draw)
        except CaseError:
            return set()

    def recompute(self, vector: dict) -> dict:
        x = vector["inputs"]
        kind = x["kind"]
        handler = {"splitmix64-sequential": self._sequential, "splitmix64-counter": self._counter,
                   "member-seed": self._member_seed, "stream-seed": self._stream_seed,
                   "gaussian": self._gaussian, "noise": self._noise, "es-run": self._es_run,
                   "gaussian-digest": self._digest, "noise-digest": self._digest, "es-chain": self._chain,
                   "shaping": self._shaping, "decay": self._decay, "step": self._step}.get(kind)
        if handler is None:
            raise Unsupported(f"vector kind {kind!r} has no protocol mapping in this esverify")
        return handler(x)

    # -- claims ----------------------------------------------------------------
    def _need(self, ops=(), **features) -> None:
        missing = client.missing_claims(self.caps, ops, **features)
        if missing:
            raise Unsupported("needs " + ", ".join(missing) + " (not in the wrapper's capabilities)")

    def _call(self, op: str, args: dict) -> dict:
        try:
            return self.process.call(op, args)
        except client.WrapperError as exc:
            raise CaseError(f"{op}: the wrapper replied with an error: {exc}") from None
        except client.ImplFailure as exc:
            raise CaseError(f"{op}: {exc.kind}: {exc}") from None

    @staticmethod
    def _field(result: dict, key: str, op: str):
        if key not in result:
            raise CaseError(f"{op}: the reply has no {key!r}")
        return result[key]

    # -- rng vectors -------------------------------------------------------------
    def _at(self, seed_hex: str, indices) -> dict:
        self._need(["at"])
        indices = list(indices)
        r = self._call("at", {"seed": seed_hex, "indices": _u64_tensor(indices)})
        return {"outputs": _golden(self._field(r, "outputs", "at"), "at outputs", (len(indices),))}

    def _sequential(self, x):
        return self._at(x["seed"], range(x["n"]))

    def _counter(self, x):
        return self._at(x["seed"], [int(i, 16) for i in x["indices"]])

    def _member_seeds(self, x, members) -> Tensor:
        r = self._call("member_seed", {"seed": x["seed"], "iteration": u64_hex(x["iteration"]),
                                       "population": u64_hex(x["population"]), "members": _u64_tensor(members),
                                       "antithetic": bool(x["antithetic"])})
        t = self._field(r, "member_seeds", "member_seed")
        _golden(t, "member_seed member_seeds", (len(members),))
        return t

    def _member_seed(self, x):
        self._need(["member_seed"])
        return {"member_seeds": _golden(self._member_seeds(x, x["members"]), "member_seeds")}

    def _stream_seeds(self, member_seed: str, scheme: str, slots) -> Tensor:
        slots = list(slots)
        r = self._call("stream_seed", {"member_seed": member_seed, "scheme": scheme, "slots": _u64_tensor(slots)})
        t = self._field(r, "stream_seeds", "stream_seed")
        _golden(t, "stream_seed stream_seeds", (len(slots),))
        return t

    def _stream_seed(self, x):
        self._need(["stream_seed"], schemes=[x["scheme"]])
        return {"stream_seeds": _golden(self._stream_seeds(x["member_seed"], x["scheme"], x["slots"]),
                                        "stream_seeds")}

    def _values(self, mapping: str, seed_hex: str, first: int, n: int) -> dict:
        r = self._call("gaussian", {"mapping": mapping, "seed": seed_hex, "first": u64_hex(first), "n": u64_hex(n)})
        return _golden(self._field(r, "values", "gaussian"), "gaussian values", (n,))

    def _gaussian(self, x):
        self._need(["gaussian"], mappings=[x["mapping"]])
        return {"values": self._values(x["mapping"], x["seed"], x["first"], x["n"])}

    def _noise(self, x):
        self._need(["member_seed", "stream_seed", "gaussian"], mappings=[x["mapping"]], schemes=[x["scheme"]])
        ms = self._member_seeds(x, [x["member"]])
        ms_hex = u64_hex(int(ms.bits.reshape(-1)[0]))
        ss = self._stream_seeds(ms_hex, x["scheme"], range(len(x["slot_sizes"]))).bits.reshape(-1)
        return {f"slot_{k}": self._values(x["mapping"], u64_hex(int(ss[k])), 0, size)
                for k, size in enumerate(x["slot_sizes"])}

    # -- long-stream digests (esverify.goldens.digest) ----------------------------
    def _stream_op(self) -> str:
        """The request the digests' values are asked with: `gaussian_ranges` where claimed, else `gaussian`
        where that is claimed (docs/PROTOCOL.md §4: range k of the bulk request is `gaussian` with the same
        arguments), else `gaussian_ranges` (what an unsupported row then names)."""
        ops = (self.caps or {}).get("operations", [])
        return "gaussian" if "gaussian_ranges" not in ops and "gaussian" in ops else "gaussian_ranges"

    def _digest_ranges(self, x) -> list:
        """The vector's (seed, first, n) ranges, noise seeds derived by the wrapper itself."""
        from .rng_area import ranges_of
        if x["kind"] == "gaussian-digest":
            self._need([self._stream_op()], mappings=[x["mapping"]])
            return ranges_of(x)
        self._need(["member_seed", "stream_seed", self._stream_op()], mappings=[x["mapping"]], schemes=[x["scheme"]])
        member_seed = lambda m: int(self._member_seeds(x, [m]).bits.reshape(-1)[0])   # noqa: E731
        stream_seed = lambda ms, slots: self._stream_seeds(u64_hex(ms), x["scheme"], slots).bits.reshape(-1).tolist()  # noqa: E731,E501
        return ranges_of(x, member_seed, stream_seed)

    def _ranges_values(self, mapping: str, ranges) -> np.ndarray:
        """The f32 values of `ranges`, concatenated (exact shapes checked): one `gaussian_ranges` request,
        or one `gaussian` request per non-empty range for a wrapper without the bulk request."""
        if self._stream_op() == "gaussian":
            parts = [self._gaussian_f32(mapping, seed, first, n) for seed, first, n in ranges if n]
            return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
        r = self._call("gaussian_ranges", {"mapping": mapping, "seeds": _u64_tensor([s for s, _, _ in ranges]),
                                           "firsts": _u64_tensor([f for _, f, _ in ranges]),
                                           "counts": _u64_tensor([n for _, _, n in ranges])})
        t = self._field(r, "values", "gaussian_ranges")
        if not isinstance(t, Tensor) or t.dtype != "f32":
            raise CaseError("gaussian_ranges: the reply's values is not an f32 tensor")
        check_shape(t, (sum(n for _, _, n in ranges),), "gaussian_ranges values")
        return t.bits.view(np.float32)

    def _gaussian_f32(self, mapping: str, seed: int, first: int, n: int) -> np.ndarray:
        """One `gaussian` request for elements first .. first+n-1 of the stream of `seed`, as f32 values
        (the reply kept as bits: a digest range is up to 2^20 values)."""
        r = self._call("gaussian", {"mapping": mapping, "seed": u64_hex(seed), "first": u64_hex(first), "n": u64_hex(n)})
        t = self._field(r, "values", "gaussian")
        if not isinstance(t, Tensor) or t.dtype != "f32":
            raise CaseError("gaussian: the reply's values is not an f32 tensor")
        check_shape(t, (n,), "gaussian values")
        return t.bits.reshape(-1).view(np.float32)

    def _digest(self, x):
        from . import digest
        ranges = self._digest_ranges(x)
        return digest.digest_fields(self._ranges_values(x["mapping"], ranges))

    def locate(self, area: str, vector: dict, got: dict) -> list | None:
        """Rows naming the first differing values of a digest vector (by sub-range requests) or of a
        chain vector (its first iteration and element); None for other kinds."""
        from . import chain, digest
        from .rng_area import ranges_of
        if vector["inputs"].get("kind") == chain.KIND:
            return self._locate_chain(area, vector, got)
        if not digest.is_digest(vector):
            return None
        x = vector["inputs"]
        mine = self._digest_ranges(x)
        limit = libm_allowance(digest.count_of(vector)) + 1
        found, requests = digest.locate(lambda lo, hi: self._ranges_values(x["mapping"], digest.split(mine, lo, hi)),
                                        ranges_of(x), x["mapping"], limit)
        return digest.rows(area, self.label, vector, ranges_of(x), found, requests, got)

    # -- chained Monte Carlo vectors (esverify.goldens.chain) ------------------------
    def _run_chain(self, x, stop=None):
        """The chain through perturb, restore and update requests, each on the wrapper's own previous
        result; (fields as esverify.goldens.chain.Recorder gives them, the state after `stop`)."""
        from ..es.reference import NP_DTYPES
        from . import chain
        c = x["config"]
        self._need(["perturb", "restore", "update"], profiles=[c["profile"]], mappings=[c["mapping"]],
                   schemes=[c["scheme"]], dtypes=sorted({p["dtype"] for p in x["params"]}),
                   shapings=[c["shaping"]], restores=[c["restore"]], antithetic=c["antithetic"])
        config = _wire_config(c)
        params = [Tensor(p["dtype"], a.view(_UINT[p["dtype"]])) for p, a in zip(x["params"], chain.initial_params(x))]
        rec = chain.Recorder(x)
        last = x["iterations"] - 1 if stop is None else stop
        state = None
        for it in range(last + 1):
            base = {"config": config, "iteration": u64_hex(it)}
            rewards = []
            for member in range(c["population"]):
                perturbed = self._params(self._call("perturb", {**base, "params": params, "member": member}),
                                         "perturb", params)
                rewards.append(chain.reward([t.bits.view(NP_DTYPES[t.dtype]) for t in perturbed]))
                args = {**base, "params": perturbed, "member": member}
                if c["restore"] == "snapshot":
                    args["snapshot"] = params
                params = self._params(self._call("restore", args), "restore", params)
            r = self._call("update", {**base, "params": params,
                                      "rewards": Tensor("f64", np.array(rewards, dtype=np.float64).view(np.uint64))})
            params = self._params(r, "update", params)
            state = [t.bits.view(NP_DTYPES[t.dtype]) for t in params]
            rec.record(it, state)
        return rec.result(), state

    def _chain(self, x):
        return self._run_chain(x)[0]

    def _locate_chain(self, area: str, vector: dict, got: dict) -> list | None:
        from . import chain
        it = chain.first_iteration(vector, got)
        if it is None:
            return None
        ref = chain.reference_label("")
        ref_fields, want = chain.run(vector["inputs"], *chain.label_target(ref), stop=it)
        if ref_fields["trace"]["values"] != vector["expected"]["trace"]["values"][:it + 1]:
            return None
        _, have = self._run_chain(vector["inputs"], stop=it)
        return chain.located_rows(area, self.label, vector, it, want, have, f"located against esverify's {ref}")

    # -- es vectors --------------------------------------------------------------
    def _shaping(self, x):
        self._need(["shaping"], shapings=["zscore", "centered_ranks"])
        z = self._call("shaping", {"shaping": "zscore", "rewards": _bits(x["rewards"])})
        ranks = self._call("shaping", {"shaping": "centered_ranks", "rewards": _bits(x["rewards"])})
        n = (len(x["rewards"]["values"]),)
        return {"zscore.coefficients": _golden(self._field(z, "coefficients", "shaping"), "shaping coefficients", n),
                "zscore.mean": _golden(self._field(z, "mean", "shaping"), "shaping mean", ()),
                "zscore.std": _golden(self._field(z, "std", "shaping"), "shaping std", ()),
                "centered_ranks.coefficients": _golden(self._field(ranks, "coefficients", "shaping"),
                                                       "shaping coefficients", n)}

    def _es_run(self, x):
        c = x["config"]
        decay_on = c["anchor_decay"] != "none" and any(v != "0x0000000000000000" for v in c["anchor_lambda"]["values"])
        self._need(["perturb", "restore", "update"], profiles=[c["profile"]], mappings=[c["mapping"]],
                   schemes=[c["scheme"]], dtypes=sorted({p["dtype"] for p in x["params"]}),
                   shapings=[c["shaping"]], restores=[c["restore"]],
                   decays=[c["anchor_decay"]] if decay_on else [], antithetic=c["antithetic"])
        config = _wire_config(c)
        shapes = [tuple(p["shape"]) for p in x["params"]]
        names = [p["name"] for p in x["params"]]
        params = [Tensor(p["dtype"], _bits(p["bits"]).bits.reshape(shape)) for p, shape in zip(x["params"], shapes)]
        anchor = list(params)
        got = {}
        for it, step in enumerate(x["iterations"]):
            base = {"config": config, "iteration": u64_hex(it)}
            perturbed = self._params(self._call("perturb", {**base, "params": params, "member": step["member"]}),
                                     "perturb", params)
            restore_args = {**base, "params": perturbed, "member": step["member"]}
            if c["restore"] == "snapshot":
                restore_args["snapshot"] = params
            restored = self._params(self._call("restore", restore_args), "restore", params)
            update_args = {**base, "params": restored, "rewards": _bits(step["rewards"])}
            if decay_on:
                update_args["anchor"] = anchor
            r = self._call("update", update_args)
            params = self._params(r, "update", params)
            for name, a, b, d in zip(names, perturbed, restored, params):
                got[f"it{it}.perturb.{name}"] = _golden(a, "params")
                got[f"it{it}.restore.{name}"] = _golden(b, "params")
                got[f"it{it}.update.{name}"] = _golden(d, "params")
            got[f"it{it}.coefficients"] = _golden(self._field(r, "coefficients", "update"), "update coefficients",
                                                  (len(step["rewards"]["values"]),))
        return got

    @staticmethod
    def _tensors(entries) -> list:
        return [Tensor(p["dtype"], _bits(p["bits"]).bits.reshape(tuple(p["shape"]))) for p in entries]

    def _decay(self, x):
        """`decay` vectors through the `decay` op: config, params, anchor -> params (docs/numerics.md §5)."""
        c = x["config"]
        self._need(["decay"], profiles=[c["profile"]], dtypes=sorted({p["dtype"] for p in x["params"]}),
                   decays=[c["anchor_decay"]])
        params = self._tensors(x["params"])
        r = self._call("decay", {"config": _wire_config(c), "params": params, "anchor": self._tensors(x["anchor"])})
        return {f"decay.{p['name']}": _golden(t, "params")
                for p, t in zip(x["params"], self._params(r, "decay", params))}

    def _step(self, x):
        """`step` vectors through the `step` op (docs/numerics.md §6); the anchor is the initial params."""
        c = x["config"]
        decay_on = c["anchor_decay"] != "none" and any(v != "0x0000000000000000" for v in c["anchor_lambda"]["values"])
        self._need(["step"], profiles=[c["profile"]], mappings=[c["mapping"]], schemes=[c["scheme"]],
                   dtypes=sorted({p["dtype"] for p in x["params"]}), shapings=[c["shaping"]],
                   restores=[c["restore"]], decays=[c["anchor_decay"]] if decay_on else [],
                   antithetic=c["antithetic"])
        params = self._tensors(x["params"])
        args = {"config": _wire_config(c), "params": params, "iteration": u64_hex(x["iteration"]),
                "rewards": _bits(x["rewards"])}
        if decay_on:
            args["anchor"] = params
        r = self._call("step", args)
        got = {f"step.{p['name']}": _golden(t, "params") for p, t in zip(x["params"], self._params(r, "step", params))}
        got["coefficients"] = _golden(self._field(r, "coefficients", "step"), "step coefficients",
                                      (len(x["rewards"]["values"]),))
        return got

    def _params(self, result: dict, op: str, like: list) -> list:
        out = self._field(result, "params", op)
        if not isinstance(out, list) or len(out) != len(like):
            raise CaseError(f"{op}: the reply's params is not a list of {len(like)} tensors")
        for k, (a, b) in enumerate(zip(out, like)):
            if not isinstance(a, Tensor) or a.dtype != b.dtype:
                raise CaseError(f"{op}: reply params[{k}] is not a {b.dtype} tensor")
            check_shape(a, b.shape, f"{op} params[{k}]")
        return [Tensor(a.dtype, np.array(a.bits, order="C")) for a in out]   # (ascontiguousarray makes 0-dim 1-dim)
