"""Versions as they are: the native rows' note names the torch and device of the
child that ran them beside the parent's, and a run warns when they differ where it matters (native
rows were compared). No child runs here."""
from __future__ import annotations

import pandas as pd

from esverify.oracle.run_report import children_torch, version_warnings

GPU = {"torch": "2.14.1+cu130", "cuda": True, "cuda_devices": ["NVIDIA H200"]}
CPU = {"torch": "2.13.0+cpu", "cuda": False, "cuda_devices": []}


def _frame(rows):
    return pd.DataFrame(rows, columns=["target", "noise", "status"])


def test_the_note_names_each_childs_torch_and_device():
    assert children_torch({"es-at-scale": GPU, "es-awd": CPU}, "2.13.0+cpu") == (
        "the children: es-at-scale torch 2.14.1+cu130 on cuda (NVIDIA H200) and cpu; es-awd torch 2.13.0+cpu on "
        "cpu; the parent (our side's native noise): torch 2.13.0+cpu")
    assert children_torch({}, "2.13.0+cpu") == "the parent (our side's native noise): torch 2.13.0+cpu"


def test_a_version_difference_warns_only_where_native_rows_were_compared():
    frame = _frame([("es-at-scale", "native", "pass"), ("es-at-scale", "contract", "pass"),
                    ("es-awd", "native", "pass"), ("es-paper", "native", "skipped")])
    envs = {"es-at-scale": GPU, "es-awd": CPU, "es-paper": GPU}
    warnings = version_warnings(envs, "2.13.0+cpu", frame)
    assert warnings == ["es-at-scale: the child ran torch 2.14.1+cu130 on cuda (NVIDIA H200) and cpu, the parent "
                        "torch 2.13.0+cpu: its 1 native rows compare torch's generator of two versions (a fail there "
                        "may be the version, not the code); fix: the same torch on both sides, or --noise contract"]
    assert version_warnings(envs, "2.13.0+cpu", frame[frame["noise"] == "contract"]) == []
