"""The clean-room ES trainer (docs/numerics.md §1-§6; Qiu et al. 2025, Algorithm 1).

Design record:
- theta is the caller's tensors, changed in place; noise is regenerated
  from the RNG contract one bounded chunk at a time on each tensor's own
  device, never stored: extra memory is O(N) plus a few chunks, whatever
  the parameter count (no N x P tensor). Opt-in copies of theta: the
  `snapshot` restore buffer and the anchor of anchored decay.
- All numerics live in the profile (esverify.es.profiles); the trainer
  only walks slots, chunks and members, so one code path serves CPU and
  CUDA, and results are bitwise the same for any chunk size or torch
  thread count (every kernel is elementwise; es-awd's tail is defined on
  the whole tensor).
- update validates everything before it touches a byte (a failed update is
  a no-op) and returns the reward statistics and coefficients.
- state_dict holds no tensors: format, RNG contract and profile versions,
  config, iteration and slot layout. Resume: build on the initial weights
  (capturing the anchor), load the state, copy the checkpointed weights in.

Checks: ``python -m pytest -q tests/test_es_*.py`` (reference equality,
invariants, errors, goldens; CUDA tests skip without a GPU) and
``esverify goldens check``.
"""
from __future__ import annotations

import re

import numpy as np
import torch

from . import noise as _noise
from .config import Config
from .decay import decay_chunk
from .numerics import DEFAULT_CHUNK, DTYPE_NAMES, DTYPES
from .profiles import get_profile
from .shaping import check_rewards, reward_f64, shape_rewards

STATE_FORMAT = "esverify.es.trainer/1"


def _slots(params) -> list[tuple[str, torch.Tensor]]:
    slots = []
    for k, item in enumerate(params):
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            name, tensor = item
        else:
            name, tensor = f"slot{k}", item
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"params[{k}] ({name}) is {type(tensor).__name__}, not a torch tensor")
        if tensor.dtype not in DTYPES:
            raise ValueError(f"params[{k}] ({name}) has dtype {tensor.dtype}; supported: f32, f16, bf16")
        if not tensor.is_contiguous():
            raise ValueError(f"params[{k}] ({name}) is not contiguous")
        slots.append((name, tensor.detach()))
    names = [n for n, _ in slots]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"params: duplicate slot names {sorted(dup)}")
    clash = _overlap([f"params[{k}] ({name})" for k, (name, _) in enumerate(slots)], [t for _, t in slots])
    if clash:
        raise ValueError(f"{clash[0]} and {clash[1]} share storage (the same tensor, tied weights or views); "
                         f"register each tensor once")
    return slots


def _permutation(order, n: int) -> np.ndarray:
    """`order` as an int64 array if it is a permutation of range(n), else ValueError naming it."""
    try:
        perm = np.asarray(order)
    except (TypeError, ValueError):
        perm = None
    if perm is None or perm.ndim != 1 or perm.dtype.kind not in "iu" or perm.shape[0] != n \
            or not np.array_equal(np.sort(perm), np.arange(n)):
        raise ValueError(f"order must be a permutation of range({n}) (each member once), got {order!r}")
    return perm.astype(np.int64)


def _overlap(labels: list[str], tensors: list[torch.Tensor]) -> tuple[str, str] | None:
    """Labels of two contiguous tensors whose memory overlaps, or None (sorted spans: adjacent pairs suffice)."""
    spans = sorted((str(t.device), t.data_ptr(), t.data_ptr() + t.numel() * t.element_size(), label)
                   for label, t in zip(labels, tensors) if t.numel())
    for a, b in zip(spans, spans[1:]):
        if a[0] == b[0] and b[1] < a[2]:
            return a[3], b[3]
    return None


def _u64_hex(value: int) -> str:
    """A u64 as docs/CONTRACT.md §5 writes it: "0x" + 16 lowercase hex digits."""
    return f"0x{int(value):016x}"


_HEX64 = re.compile(r"0x[0-9a-fA-F]{16}")


def _u64_from_state(value, what: str) -> int:
    """A u64 of a state dict, written as "0x" + 16 hex digits or as a JSON int; ValueError naming `what`."""
    if isinstance(value, str) and _HEX64.fullmatch(value):
        return int(value, 16)
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and 0 <= value < 2 ** 64:
        return int(value)
    raise ValueError(f"state {what} must be a u64: \"0x\" + 16 hex digits or an int in [0, 2**64) "
                     f"(a u64 counter, docs/CONTRACT.md §4), got {value!r}")


class Trainer:
    """ES on a fixed list of parameter tensors, in place (docs/numerics.md §6).

    params: iterable of torch tensors or (name, tensor) pairs (e.g.
    ``module.named_parameters()``): contiguous, f32/f16/bf16, CPU or CUDA,
    no shared storage; slot index = registration order. config: a Config.
    backend: optional esverify.rng backend name for the noise (None: the
    fastest for the device). noise: "contract" (default, docs/CONTRACT.md) or "torch"
    (torch's own generator as the references use it, esverify.es.noise.
    TorchNoise: correlated scheme only, bitwise only on the same device
    type and torch version, whole-tensor draws); torch_seed: with
    noise="torch", a callable mapping the u64 member seed to the torch seed
    (default: the u64 itself). run_log: None, or a folder where the
    trainer writes its run log after every update, in es-awd's schema, so
    that `esverify replay` can rebuild the weights (esverify.es.runlog,
    docs/replay.md §2). Raises TypeError/ValueError naming the offending
    parameter.

    Attributes: slots (list of (name, tensor) pairs; the tensors are
    detached views sharing the caller's storage), config, profile (the
    Profile named by config.profile), noise (a NoiseSource), iteration
    (int, the next update's iteration).
    """

    def __init__(self, params, config: Config | None = None, *, backend: str | None = None,
                 noise: str = "contract", torch_seed=None, run_log=None):
        config = Config() if config is None else config
        if not isinstance(config, Config):
            raise TypeError(f"config must be an esverify.es.Config, got {type(config).__name__}")
        self.slots = _slots(params)
        self.config = config
        self._seeds, self._seeds_of = {}, None   #: member_seed's answers for the config object _seeds_of
        self.profile = get_profile(config.profile)
        if noise == "torch" and config.scheme != "correlated":
            raise ValueError(f"noise='torch' has only the correlated scheme (the references seed every tensor's "
                             f"generator with the member's seed, docs/references.md §3a), got scheme {config.scheme!r}")
        self.noise = _noise.make_noise(noise, config.mapping, backend, torch_seed)
        self.iteration = 0
        self._active = None
        self._snapshot = None
        self._anchor = None
        if config.decay_on:
            self.capture_anchor()
        self._evaluated = []   # members restored by regeneration since the last update (their residue stays)
        self._run_log = None
        if run_log is not None:
            from .runlog import RunLogWriter
            self._run_log = RunLogWriter(run_log, self)

    # -- layout and seeds -------------------------------------------------
    @property
    def params(self) -> list[torch.Tensor]:
        """theta: the registered tensors in slot order (detached, sharing the caller's storage)."""
        return [t for _, t in self.slots]

    @property
    def chunk(self) -> int:
        """Elements per work chunk: config.chunk_elements or DEFAULT_CHUNK (2**18); never changes a bit.

        Under noise="torch" a chunk is a whole tensor: torch draws a tensor's noise at once."""
        if self.noise.kind == "torch":
            return max([t.numel() for _, t in self.slots] + [1])
        return self.config.chunk_elements or DEFAULT_CHUNK

    @property
    def active_member(self) -> int | None:
        """The member currently applied to theta, or None."""
        return self._active

    def layout(self) -> list[dict]:
        """Per slot: name, shape (list) and dtype name ("f32", "f16", "bf16")."""
        return [{"name": n, "shape": list(t.shape), "dtype": DTYPE_NAMES[t.dtype]} for n, t in self.slots]

    def rules(self) -> list[str]:
        """The profile rule each slot uses (chosen by the tensor's device)."""
        return [self.profile.rule_for(t.device) for _, t in self.slots]

    def member_seed(self, member: int, iteration: int | None = None) -> int:
        """u64 member seed of `member` at `iteration` (default: the current one), docs/CONTRACT.md §4.

        Antithetic members 2k and 2k+1 share member 2k's seed. TypeError /
        ValueError naming `member` when it is not an int in [0, population).
        """
        member = self._check_member(member)
        iteration = self.iteration if iteration is None else iteration
        if isinstance(iteration, bool) or not isinstance(iteration, (int, np.integer)):
            return _noise.noise_seed(self.config, iteration, member)   # not kept: raises what it raised
        if self._seeds_of is not self.config:   # kept per config object: a new config starts afresh
            self._seeds, self._seeds_of = {}, self.config
        seed = self._seeds.get((iteration, member))
        if seed is None:   # a numpy schedule draws the whole iteration's list for one seed: ~6 us a call
            seed = self._seeds[iteration, member] = _noise.noise_seed(self.config, iteration, member)
            if len(self._seeds) > 4096:
                self._seeds = {(iteration, member): seed}
        return seed

    def stream_seed(self, member: int, slot: int, iteration: int | None = None) -> int:
        """u64 seed of the gaussian stream of (member, slot) at `iteration` (docs/CONTRACT.md §4, config.scheme).

        Errors as member_seed; TypeError/ValueError naming `slot` unless it is an int in [0, 2**64).
        """
        return _noise.stream_seed_u64(self.member_seed(member, iteration), slot, self.config.scheme)

    def _check_member(self, member) -> int:
        if isinstance(member, bool) or not isinstance(member, (int, np.integer)):
            raise TypeError(f"member must be an int, got {type(member).__name__} {member!r}")
        if not 0 <= member < self.config.population:
            raise ValueError(f"member {member} is outside the population [0, {self.config.population})")
        return int(member)

    def _chunks(self, slot: int):
        """The (start, end) element ranges of `slot`, at most `chunk` long each."""
        n = self.slots[slot][1].numel()
        for start in range(0, n, self.chunk):
            yield start, min(n, start + self.chunk)

    def _draw(self, member: int, slot: int, start: int, end: int, device) -> torch.Tensor:
        if self.noise.kind == "torch":   # correlated: the member's seed for every tensor (docs/references.md §3a)
            noise = self.noise.draw_tensor(self.noise.seed_for(self.member_seed(member)), self.slots[slot][1])
            return noise[start:end]
        return self.noise.draw(self.stream_seed(member, slot), start, end - start, device)

    def _accumulate_drawn(self, acc, terms, slot: int, start: int, dtype, rule) -> bool:
        """The profile's accumulate_drawn of every term's member noise for this chunk, in order (drawn inside
        the kernel, never written to memory; the same bits as _draw then accumulate, member by member): False,
        nothing done, when the noise is torch's, its backend was chosen to be other than numba's, or the
        profile or chunk has no such path."""
        drawn = self.profile.accumulate_drawn
        if drawn is None or self.noise.kind != "contract" or self.noise.backend not in (None, "numba") \
                or not getattr(self.noise, "inline", True):   # a source that must see every range (the oracle's)
            return False
        seeds = [self.stream_seed(member, slot) for member, _ in terms]
        if not drawn(acc, seeds, start, self.noise.mapping, [c for _, c in terms], dtype, rule):
            return False
        self.noise.count(acc.numel() * len(terms))
        return True

    def _signed_sigma(self, member: int, restore: bool) -> float:
        s = _noise.sign_of(member, self.config.antithetic) * self.config.sigma
        return -s if restore else s

    # -- perturb / restore / materialize ---------------------------------
    def perturb(self, member: int) -> None:
        """theta <- theta + sigma * q(eps_member) in place, per the profile (docs/numerics.md §3).

        Odd members of antithetic pairs apply -sigma. Raises RuntimeError when
        a member is already active.
        """
        member = self._check_member(member)
        if self._active is not None:
            raise RuntimeError(f"perturb({member}): member {self._active} is still active; restore it first")
        if self.config.restore == "snapshot":
            self._take_snapshot()
        self._apply_noise(member, restore=False)
        self._active = member

    def restore(self, member: int) -> None:
        """Undo perturb(member): `regenerate` subtracts the same t, `snapshot` copies bytes back.

        Raises RuntimeError when `member` is not the active member.
        """
        member = self._check_member(member)
        if self._active != member:
            raise RuntimeError(f"restore({member}): the active member is {self._active}")
        if self.config.restore == "snapshot":
            with torch.no_grad():
                for (_, t), saved in zip(self.slots, self._snapshot):
                    t.copy_(saved)
        else:
            self._apply_noise(member, restore=True)
            self._evaluated.append(member)
        self._active = None

    def _take_snapshot(self) -> None:
        with torch.no_grad():
            if self._snapshot is None:
                self._snapshot = [t.clone() for _, t in self.slots]
            else:
                for (_, t), saved in zip(self.slots, self._snapshot):
                    saved.copy_(t)

    def _apply_noise(self, member: int, restore: bool) -> None:
        s = self._signed_sigma(member, restore)
        with torch.no_grad():
            for slot, (_, t) in enumerate(self.slots):
                flat, n, rule = t.view(-1), t.numel(), self.profile.rule_for(t.device)
                for start, end in self._chunks(slot):
                    eps = self._draw(member, slot, start, end, t.device)
                    self.profile.perturb(flat[start:end], eps, s, rule, start, n, flat[start:end])

    def materialize(self, member: int, out) -> None:
        """Write perturb(member)'s bits into `out` without touching theta.

        out: a sequence (slot order) or a dict keyed by slot name of
        contiguous tensors with each slot's shape and dtype (any device),
        sharing no memory with theta or each other (ValueError otherwise).
        Must not be called while a member is active (theta would not be the
        unperturbed weights). Safe to call from several threads at once.
        """
        member = self._check_member(member)
        if self._active is not None:
            raise RuntimeError(f"materialize({member}): member {self._active} is active; theta is perturbed")
        if isinstance(out, dict):
            missing = [n for n, _ in self.slots if n not in out]
            if missing:
                raise ValueError(f"out has no tensor for slot(s) {missing}")
            outs = [out[n] for n, _ in self.slots]
        else:
            outs = list(out)
        if len(outs) != len(self.slots):
            raise ValueError(f"out has {len(outs)} tensors, the trainer has {len(self.slots)} slots")
        for k, ((name, t), o) in enumerate(zip(self.slots, outs)):
            if not isinstance(o, torch.Tensor) or o.shape != t.shape or o.dtype != t.dtype or not o.is_contiguous():
                raise ValueError(f"out[{k}] must be a contiguous {t.dtype} tensor of shape {tuple(t.shape)} "
                                 f"(slot {name})")
        clash = _overlap([f"out[{k}]" for k in range(len(outs))] + [f"params[{k}]" for k in range(len(outs))],
                         outs + self.params)
        if clash:   # writing into theta (or into another out) would break "without touching theta"
            raise ValueError(f"{clash[0]} and {clash[1]} share storage; materialize needs separate out tensors")
        s = self._signed_sigma(member, restore=False)
        with torch.no_grad():
            for slot, ((_, t), o) in enumerate(zip(self.slots, outs)):
                flat, oflat, n, rule = t.view(-1), o.view(-1), t.numel(), self.profile.rule_for(t.device)
                for start, end in self._chunks(slot):
                    eps = self._draw(member, slot, start, end, t.device)
                    self.profile.perturb(flat[start:end], eps, s, rule, start, n, oflat[start:end])

    # -- update ------------------------------------------------------------
    def coefficients(self, rewards, order=None) -> tuple[np.ndarray, dict]:
        """Validate `rewards` (N finite values, member order) and shape them; see esverify.es.shape_rewards.

        order: None, or a permutation of range(N) naming the order in which
        the rewards were collected (es-awd's mirrored loop: every +sigma
        member, then every -sigma one). The statistics and the shaping then
        run over the rewards in that order: numpy's summation order decides
        the last bit of the mean and std (docs/numerics.md §2), and centered ranks break
        ties by that order. The coefficients come back in member order.
        ValueError when `order` is not a permutation of range(N).
        """
        r = check_rewards(rewards, self.config.population)
        if order is None:
            return shape_rewards(r, self.config.shaping)
        perm = _permutation(order, r.shape[0])
        coeffs, stats = shape_rewards(np.ascontiguousarray(r[perm]), self.config.shaping)
        back = np.empty_like(coeffs)
        back[perm] = coeffs
        stats["coefficients"] = back
        return back, stats

    def update(self, rewards, *, order=None) -> dict:
        """theta += (alpha / N) sum_n C_n q(eps_n), per the profile; then anchored decay.

        rewards: N finite floats in member order; order: None or the order in
        which they were collected (see `coefficients`). Everything is validated
        first (non-finite coefficients, e.g. from an f64 overflow, are a
        ValueError too); on error nothing changes. Antithetic pairs fold to
        D_k = C_2k - C_2k+1 (f64) with divisor N (docs/numerics.md §4). Returns a dict:
        mean, std, min, max, shaping, coefficients (f64 array, the shaped C_n),
        terms (the f64 coefficients applied: C_n, or D_k when antithetic),
        iteration (the one just used), profile, profile_version, rule (one
        name, or "mixed") and rules (per slot).
        """
        if self._active is not None:
            raise RuntimeError(f"update: member {self._active} is still active; restore it first")
        cfg = self.config
        # an f64 overflow is turned into the ValueError below, not a warning
        with np.errstate(over="ignore", invalid="ignore"):
            coeffs, stats = self.coefficients(rewards, order)
            if cfg.antithetic:
                terms = [(2 * k, float(coeffs[2 * k] - coeffs[2 * k + 1])) for k in range(cfg.population // 2)]
            else:
                terms = [(n, float(c)) for n, c in enumerate(coeffs)]
        bad = [m for m, c in terms if not np.isfinite(c)]
        if bad:   # finite rewards can still overflow in f64 (numpy's mean, a fold): as poisonous as a NaN
            raise ValueError(f"rewards: the coefficients of member(s) {bad} are not finite (f64 overflow "
                             f"in shaping {cfg.shaping!r}{' or the antithetic fold' if cfg.antithetic else ''}); "
                             f"nothing was changed")
        with np.errstate(over="ignore"):   # every profile rounds the term to f32 first (docs/numerics.md §3)
            wide = [m for m, c in terms if not np.isfinite(np.float32(c))]
        if wide:   # e.g. shaping 'none' with a reward beyond f32's range: rd32(C) = inf would poison theta
            raise ValueError(f"rewards: the coefficients of member(s) {wide[:8]} are beyond f32's range "
                             f"(+-3.4e38; shaping {cfg.shaping!r}): the update rounds them to f32 and would "
                             f"write infinities; nothing was changed")
        rules = self.apply_terms(terms)
        if self._run_log is not None:
            self._log_iteration(terms)
        self._evaluated = []
        stats.update(iteration=self.iteration, terms=np.array([c for _, c in terms], dtype=np.float64),
                     profile=self.profile.name, profile_version=self.profile.version, rules=rules,
                     rule=rules[0] if len(set(rules)) == 1 else ("mixed" if rules else "none"))
        self.iteration += 1
        return stats

    def apply_terms(self, terms) -> list:
        """theta += scale * sum over `terms` of c q(eps_member), per slot and chunk with the profile's
        kernels, then anchored decay: the arithmetic of `update` after its checks (docs/numerics.md §3-§5).
        terms: (member, f64 coefficient) pairs as `update` folds them; nothing is checked here (the parity
        rows of non-finite rewards apply NaN and infinite terms through it, esverify.oracle.nonfinite).
        Returns the rule of each slot. Does not advance the iteration."""
        cfg = self.config
        scale = self.profile.scale(cfg.alpha, cfg.population)
        decay_step = cfg.alpha * cfg.anchor_lambda if cfg.decay_on else None
        rules = self.rules()
        with torch.no_grad():
            for slot, (_, t) in enumerate(self.slots):
                flat, n, rule, dt = t.view(-1), t.numel(), rules[slot], t.dtype
                anchor = self._anchor[slot].view(-1) if decay_step is not None else None
                for start, end in self._chunks(slot):
                    acc = self.profile.new_acc(end - start, dt, t.device)
                    if not self._accumulate_drawn(acc, terms, slot, start, dt, rule):
                        for member, c in terms:
                            eps = self._draw(member, slot, start, end, t.device)
                            acc = self.profile.accumulate(acc, eps, c, dt, rule, start, n)
                    self.profile.apply(flat[start:end], acc, scale, rule, start, n, flat[start:end])
                    if decay_step is not None:
                        flat[start:end].copy_(decay_chunk(flat[start:end], anchor[start:end], cfg.anchor_decay,
                                                          decay_step, rule))
        return rules

    def _log_iteration(self, terms) -> None:
        """The run log's record of the update just applied (esverify.es.runlog, docs/replay.md §2)."""
        def seed(member):
            s = self.member_seed(member)
            return self.noise.seed_for(s) if self.noise.kind == "torch" else s
        evaluated = [(_noise.noise_member(m, self.config.antithetic) // (2 if self.config.antithetic else 1),
                      _noise.sign_of(m, self.config.antithetic)) for m in self._evaluated]
        self._run_log.iteration(self.iteration, [seed(m) for m, _ in terms], [c for _, c in terms], evaluated)

    def step(self, evaluate) -> dict:
        """One iteration: perturb, evaluate, restore every member, then update.

        evaluate: callable(member: int) -> float. If it raises, theta is
        restored before the error propagates and no update happens.
        Returns update's statistics.
        """
        rewards = []
        for member in range(self.config.population):
            self.perturb(member)
            try:
                reward = evaluate(member)
            finally:
                self.restore(member)
            rewards.append(reward_f64(member, reward))   # the same TypeError/ValueError as update's
        return self.update(rewards)

    # -- anchor and state --------------------------------------------------
    def capture_anchor(self) -> None:
        """(Re)capture the anchor theta0 of anchored decay from the current parameters."""
        if self._active is not None:
            raise RuntimeError(f"capture_anchor: member {self._active} is active; theta is perturbed")
        with torch.no_grad():
            self._anchor = [t.clone() for _, t in self.slots]

    @property
    def anchor(self) -> list[torch.Tensor] | None:
        """theta0 of anchored decay (docs/numerics.md §5): clones of the slots in slot order, or None.

        Captured at construction when decay is on, by `capture_anchor`, or by
        load_state_dict when the loaded config turns decay on. Same shapes,
        dtypes and devices as `params`; the trainer never writes to them.
        """
        return self._anchor

    def state_dict(self) -> dict:
        """JSON-able state, no tensors (docs/numerics.md §6).

        u64 values (the config's seed, the iteration counter) are written as
        ``0x`` + 16 lowercase hex digits, as the goldens write them (docs/CONTRACT.md §5):
        a JSON reader that parses numbers as f64 would round a bare
        18446744073709551615. `load_state_dict` reads both that form and ints.
        """
        config = self.config.to_dict()
        config["seed"] = _u64_hex(config["seed"])
        return {"format": STATE_FORMAT, "rng_contract": _noise.CONTRACT_VERSION,
                "profile": self.profile.name, "profile_version": self.profile.version,
                "config": config, "iteration": _u64_hex(self.iteration), "slots": self.layout(),
                "noise": self.noise.kind}

    def load_state_dict(self, state: dict) -> None:
        """Adopt a state from state_dict(): its config and iteration.

        Refuses (ValueError naming the field) another format, RNG contract
        or profile version, a config that is not exactly Config's fields, or
        another slot layout; also refuses while a
        member is active. chunk_elements keeps this trainer's value (it
        never changes a bit). Load the checkpointed weights into the tensors
        afterwards.
        """
        if self._active is not None:
            raise RuntimeError("load_state_dict: a member is active; restore it first")
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise ValueError(f"state format: expected {STATE_FORMAT!r}, got "
                             f"{state.get('format') if isinstance(state, dict) else type(state).__name__!r}")
        if state.get("rng_contract") != _noise.CONTRACT_VERSION:
            raise ValueError(f"state rng_contract: version {state.get('rng_contract')!r}, this esverify "
                             f"implements {_noise.CONTRACT_VERSION}")
        cfg = state.get("config")
        fields = set(Config.__dataclass_fields__)
        if not isinstance(cfg, dict):
            raise ValueError(f"state config: expected a dict of Config's fields, got {type(cfg).__name__}")
        if "seed_schedule" not in cfg:
            cfg = dict(cfg, seed_schedule="contract")   # to_dict leaves the default out (Config.to_dict)
        if set(cfg) != fields:   # a default would silently change every later iteration's noise
            raise ValueError(f"state config: missing fields {sorted(fields - set(cfg))}, "
                             f"unknown fields {sorted(set(cfg) - fields)}")
        cfg = dict(cfg)
        try:
            profile = get_profile(cfg.get("profile", state.get("profile")))
        except ValueError as exc:
            raise ValueError(f"state profile: {exc}") from None
        if state.get("profile") != profile.name or state.get("profile_version") != profile.version:
            raise ValueError(f"state profile_version: {state.get('profile')!r} v{state.get('profile_version')!r}, "
                             f"this esverify implements {profile.name!r} v{profile.version}")
        if state.get("slots") != self.layout():
            raise ValueError(f"state slots: the layout {state.get('slots')!r} differs from this trainer's "
                             f"{self.layout()!r}")
        if state.get("noise", "contract") != self.noise.kind:   # torch noise is another population
            raise ValueError(f"state noise: {state.get('noise')!r}, this trainer draws {self.noise.kind!r} noise")
        it = _u64_from_state(state.get("iteration"), "iteration")
        cfg["seed"] = _u64_from_state(cfg["seed"], "config seed")
        cfg["chunk_elements"] = self.config.chunk_elements
        config = Config(**cfg)
        self.config, self.profile, self.iteration = config, profile, it
        if self.noise.kind == "contract":
            self.noise = _noise.NoiseSource(config.mapping, self.noise.backend)
        if config.decay_on and self._anchor is None:
            self.capture_anchor()
