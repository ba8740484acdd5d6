"""Is this process flushing subnormals to zero, or rounding other than to nearest? (docs/numerics.md §3,
docs/CONTRACT.md §3b)

Every contract result is an IEEE-754 result, subnormals included. A process
can silently leave IEEE arithmetic: `torch.set_flush_denormal(True)` sets
the CPU's FTZ/DAZ bits, and a shared library built with `-ffast-math`
sets them when it is loaded (its crtfastmath.o constructor). Then
subnormal inputs read as zero (DAZ) and subnormal results become zero
(FTZ), and the f32/f16/bf16 trainer results in the subnormal range change.

`flush_to_zero_status()` computes a few known subnormal results with
numpy, torch and plain Python floats (all on the calling thread, where the
gate and the parity runner compute) and says which of them flushed. The
gate (`esverify goldens check`) and `esverify parity` call it before they
run anything and refuse to run in a flushing process (exit 2).

The rounding mode is the other half of the float environment: every
contract operation rounds to nearest, ties to even, and so do the F16C
conversions, libm and numpy only while the FPU's mode (fesetround, the
MXCSR's RC bits) says so. A library that sets another mode and does not
restore it changes every rounded result, in every dtype; the probe then
names the mode (toward zero, downward, upward) and the same callers
refuse to run.

Known answers (exact in IEEE arithmetic, each printed bit for bit):
- f32: 2**-126 * 2**-3 = 2**-129 (subnormal, bits 0x00100000); FTZ gives 0;
- f32: (2**-130, a subnormal input) * 2 = 2**-129; DAZ gives 0;
- f64: 2**-1022 * 2**-3 = 2**-1025 (subnormal); FTZ gives 0;
- torch f32 tensors: the same two f32 products;
- rounding, f64 (Python floats) and f32 (numpy), with u the ulp of 1: 1 + u/4
  gives 1 (to nearest, toward zero, downward) or 1 + u (upward); 1 + 3u/4
  gives 1 + u (to nearest, upward) or 1 (toward zero, downward); -1 - 3u/4
  gives -(1 + u) (to nearest, downward) or -1 (toward zero, upward).
"""
from __future__ import annotations

import struct
import sys
from dataclasses import dataclass, field

SETTINGS_HINT = ("torch.set_flush_denormal(True), or a library built with -ffast-math (which sets the CPU's "
                 "FTZ/DAZ flags when it is loaded)")
ROUNDING_HINT = "fesetround() called by a library (or by ctypes) and not set back to FE_TONEAREST"
#: the rounding mode IEEE-754 and the contract assume
NEAREST = "to nearest"


@dataclass(frozen=True)
class FlushStatus:
    """The float environment's verdict. flushing: True when the environment is not IEEE's default, that is
    when any probe lost a subnormal or the rounding mode is not to nearest (every caller refuses both the
    same way); findings: one line per probe that found either; rounding: the mode the probes saw
    ("to nearest", "toward zero", "downward", "upward", or "unknown (...)")."""

    flushing: bool
    findings: tuple = field(default_factory=tuple)
    rounding: str = NEAREST

    def message(self) -> str:
        """One line naming what is off (the rounding mode first, then what flushed) and the usual causes
        (empty when nothing is)."""
        if not self.flushing:
            return ""
        ftz = [f for f in self.findings if not f.startswith(ROUNDING_TAG)]
        parts = []
        if self.rounding != NEAREST:
            parts.append(f"this process rounds {self.rounding}, not to nearest (the FPU's rounding mode): "
                         + "; ".join(f[len(ROUNDING_TAG):] for f in self.findings if f.startswith(ROUNDING_TAG))
                         + f". Usual cause: {ROUNDING_HINT}. Every rounded result would differ from the contract")
        if ftz:
            parts.append("this process flushes subnormals to zero (FTZ/DAZ): " + "; ".join(ftz)
                         + f". Usual causes: {SETTINGS_HINT}. Results in the subnormal range would differ from "
                           "the contract")
        return "; and ".join(parts) + ", so nothing was run; run in a process without that setting."


def _f32_bits(x) -> int:
    return struct.unpack("<I", struct.pack("<f", float(x)))[0]


def _numpy_findings() -> list[str]:
    import numpy as np
    out = []
    tiny = np.float32(2.0 ** -126)
    ftz = tiny * np.float32(0.125)
    if _f32_bits(ftz) != 0x00100000:
        out.append(f"numpy f32 2**-126 * 2**-3 gave bits 0x{_f32_bits(ftz):08x}, not 0x00100000 (FTZ)")
    sub = np.frombuffer(struct.pack("<I", 0x00080000), dtype=np.float32)[0]       # 2**-130
    daz = sub * np.float32(2.0)
    if _f32_bits(daz) != 0x00100000:
        out.append(f"numpy f32 2**-130 * 2 gave bits 0x{_f32_bits(daz):08x}, not 0x00100000 (DAZ)")
    f64 = np.float64(2.0 ** -1022) * np.float64(0.125)
    if f64 == 0.0:
        out.append("numpy f64 2**-1022 * 2**-3 gave 0, not 2**-1025 (FTZ)")
    return out


def _python_findings() -> list[str]:
    tiny, eighth = 2.0 ** -1022, 0.125
    return [] if tiny * eighth != 0.0 else ["Python float 2**-1022 * 2**-3 gave 0, not 2**-1025 (FTZ)"]


def _torch_findings() -> list[str]:
    torch = sys.modules.get("torch")
    if torch is None:        # not loaded: it cannot have set anything; importing it just to look is costly
        try:
            import torch  # noqa: F811 - the gate and parity use torch anyway
        except ImportError:
            return []
    out = []
    a = torch.tensor([2.0 ** -126], dtype=torch.float32) * torch.tensor([0.125], dtype=torch.float32)
    if int(a.view(torch.int32)[0]) != 0x00100000:
        out.append(f"torch f32 2**-126 * 2**-3 gave bits 0x{int(a.view(torch.int32)[0]) & 0xFFFFFFFF:08x} (FTZ)")
    sub = torch.tensor([0x00080000], dtype=torch.int32).view(torch.float32)
    b = sub * torch.tensor([2.0], dtype=torch.float32)
    if int(b.view(torch.int32)[0]) != 0x00100000:
        out.append(f"torch f32 2**-130 * 2 gave bits 0x{int(b.view(torch.int32)[0]) & 0xFFFFFFFF:08x} (DAZ)")
    return out


#: the start of every rounding finding (FlushStatus.message tells them from the FTZ/DAZ ones by it)
ROUNDING_TAG = "rounding: "
_MODES = {(False, True, True): NEAREST, (False, False, False): "toward zero", (False, False, True): "downward",
          (True, True, False): "upward"}


def _mode(one, quarter_ulp, label: str) -> tuple[str, list[str]]:
    """(mode, findings) from three sums in the type of `one` (1.0 as a Python float or a numpy scalar)
    and its quarter ulp; the inputs arrive as arguments so that no sum is folded at compile time."""
    up = one + quarter_ulp != one                                # 1 + u/4: only upward moves it
    three = quarter_ulp * 3
    ahead = one + three != one                                   # 1 + 3u/4: to nearest and upward
    away = -one - three != -one                                  # -1 - 3u/4: to nearest and downward
    mode = _MODES.get((bool(up), bool(ahead), bool(away)), f"unknown (probes {int(up)}{int(ahead)}{int(away)})")
    if mode == NEAREST:
        return mode, []
    return mode, [f"{ROUNDING_TAG}{label} 1 + u/4, 1 + 3u/4 and -1 - 3u/4 round as {mode}, not to nearest"]


def _rounding_findings() -> tuple[str, list[str]]:
    import numpy as np
    mode, out = _mode(float(1), 2.0 ** -54, "Python f64")
    mode32, out32 = _mode(np.float32(1), np.float32(2.0 ** -25), "numpy f32")
    return (mode if mode != NEAREST else mode32), out + out32


def what_is_off(findings) -> tuple[str, str, str]:
    """(what the process does, its usual causes, what it costs) in words, for probe lines `findings` (a
    child's, read from its reply): FTZ/DAZ, a rounding mode other than to nearest, or both."""
    rounding = any(str(f).startswith(ROUNDING_TAG) for f in findings)
    ftz = any(not str(f).startswith(ROUNDING_TAG) for f in findings)
    does = " and ".join(w for w, on in (("flushes subnormals to zero (FTZ/DAZ)", ftz),
                                         ("rounds other than to nearest (the FPU's rounding mode)", rounding)) if on)
    causes = "; ".join(h for h, on in ((SETTINGS_HINT, ftz), (ROUNDING_HINT, rounding)) if on)
    cost = ("its results in the subnormal range are not IEEE results" if not rounding else
            "its rounded results are not the contract's")
    return does, causes, cost


def flush_to_zero_status(import_torch: bool = True) -> FlushStatus:
    """Probe this thread's float environment (subnormals and the rounding mode); FlushStatus(flushing,
    findings, rounding). Never raises.

    Cost: microseconds (plus importing torch when it is not loaded yet; with `import_torch` False torch
    is probed only when it is loaded: a caller that imports it later probes again then).
    """
    findings = []
    probes = (_python_findings, _numpy_findings) + \
        ((_torch_findings,) if import_torch or "torch" in sys.modules else ())
    for probe in probes:
        try:
            findings += probe()
        except Exception as exc:  # a broken probe must not pass as "not flushing" silently
            findings.append(f"the {probe.__name__.strip('_').replace('_findings', '')} probe raised "
                            f"{type(exc).__name__}: {exc}")
    rounding = NEAREST
    try:
        rounding, found = _rounding_findings()
        findings += found
    except Exception as exc:  # as above: a probe that cannot say is a finding
        rounding = f"unknown (the rounding probe raised {type(exc).__name__}: {exc})"
        findings.append(f"{ROUNDING_TAG}the probe raised {type(exc).__name__}: {exc}")
    return FlushStatus(bool(findings), tuple(findings), rounding)
