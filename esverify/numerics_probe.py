"""Is this process flushing subnormals to zero? (issue 10 item 3; docs/numerics.md §3, docs/CONTRACT.md §3b)

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

Known answers (exact in IEEE arithmetic, each printed bit for bit):
- f32: 2**-126 * 2**-3 = 2**-129 (subnormal, bits 0x00100000); FTZ gives 0;
- f32: (2**-130, a subnormal input) * 2 = 2**-129; DAZ gives 0;
- f64: 2**-1022 * 2**-3 = 2**-1025 (subnormal); FTZ gives 0;
- torch f32 tensors: the same two f32 products.
"""
from __future__ import annotations

import struct
import sys
from dataclasses import dataclass, field

SETTINGS_HINT = ("torch.set_flush_denormal(True), or a library built with -ffast-math (which sets the CPU's "
                 "FTZ/DAZ flags when it is loaded)")


@dataclass(frozen=True)
class FlushStatus:
    """flushing: True when any probe lost a subnormal; findings: one line per probe that did."""

    flushing: bool
    findings: tuple = field(default_factory=tuple)

    def message(self) -> str:
        """A one-paragraph explanation naming what flushed and the usual causes (empty when not flushing)."""
        if not self.flushing:
            return ""
        return ("this process flushes subnormals to zero (FTZ/DAZ): " + "; ".join(self.findings)
                + f". Usual causes: {SETTINGS_HINT}. Results in the subnormal range would differ from the "
                  "contract, so nothing was run; run in a process without that setting.")


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


def flush_to_zero_status(import_torch: bool = True) -> FlushStatus:
    """Probe this thread's float environment; FlushStatus(flushing, findings). Never raises.

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
    return FlushStatus(bool(findings), tuple(findings))
