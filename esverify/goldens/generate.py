"""`goldens generate`: write `<area>.json` from the slow reference, guarding the contract.

The new vectors are compared per id with the baseline: the file as
committed at HEAD when the goldens folder is in a git checkout and HEAD
has it (so deleting or hand-editing the work-tree file cannot slip a
change through), else the file in the goldens folder. New ids are free;
comments are free; a changed or removed id needs --bump, and --bump only
checks (it edits neither) that the area's version constant is higher than
the baseline file's version and that CHANGELOG.md has a heading
``## <area> v<N>`` for the new version. A version lower than the
baseline's is always refused.

Exit codes: 0 written (or unchanged); 1 refused by the rules above;
2 cannot run (no checkout and no --out, unreadable baseline, an
explicitly named area whose module does not import, unknown area).
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from . import areas as area_mod
from . import fileformat, history


@dataclass
class AreaOutcome:
    area: str
    status: str            #: written | unchanged | refused | skipped | error
    message: str
    counts: dict = field(default_factory=dict)


def changelog_has(changelog: Path, area: str, version: int) -> bool:
    """True when `changelog` has a heading line ``## <area> v<version>``."""
    try:
        text = Path(changelog).read_text(encoding="utf-8")
    except OSError:
        return False
    pattern = rf"^##\s+{re.escape(area)}\s+v{int(version)}\s*$"
    return re.search(pattern, text, flags=re.MULTILINE) is not None


def baseline(baseline_dir: Path, name: str) -> tuple[dict | None, str]:
    """(document, where it came from) that `generate` compares with, or (None, path) when there is none.

    HEAD's committed file when `baseline_dir` is in a git checkout whose
    HEAD has it, else the file in `baseline_dir`. Raises GoldenFileError
    when that file cannot be read or fails the schema.
    """
    path = fileformat.golden_path(baseline_dir, name)
    try:
        root, commit = history.resolve(baseline_dir, "HEAD")
    except history.GitRefError:  # not a checkout, or no commit yet
        root = None
    if root is not None:
        try:
            committed = history.load_at(root, commit, path, "HEAD")
        except ValueError as exc:  # the folder resolves outside the repository
            raise fileformat.GoldenFileError(f"cannot locate {path} in {root}: {exc}") from exc
        if committed is not None:
            return committed, f"{path} at HEAD"
    if path.exists():
        return fileformat.load(path), str(path)
    return None, str(path)


def generate_area(area, baseline_dir: Path, out_dir: Path, bump: bool, changelog: Path) -> AreaOutcome:
    """Generate one area and write it under `out_dir` if the per-id rules allow."""
    name = area.name
    new = fileformat.make_document(name, area.version, area.generate())
    try:
        fileformat.validate(new, f"generated {name} vectors")
    except fileformat.GoldenFileError as exc:
        return AreaOutcome(name, "error", f"the area's generator produced an invalid document: {exc}")
    try:
        old, base_path = baseline(baseline_dir, name)
    except fileformat.GoldenFileError as exc:
        return AreaOutcome(name, "error", f"cannot compare with the baseline: {exc}")
    counts = {"vectors": len(new["vectors"]), "new": len(new["vectors"]), "changed": 0, "removed": 0}
    if old is not None:
        d = fileformat.diff_ids(old, new)
        counts.update({k: len(v) for k, v in d.items()})
        old_version = old["contract"]["version"]
        if area.version < old_version:
            return AreaOutcome(name, "refused", f"{area.version_constant} is {area.version}, lower than version "
                               f"{old_version} of {base_path}; versions never go backwards", counts)
        touched = d["changed"] + d["removed"]
        if touched:
            listed = ", ".join(d["changed"][:5] + d["removed"][:5])
            what = f"{len(d['changed'])} changed and {len(d['removed'])} removed vector id(s) ({listed})"
            if not bump:
                return AreaOutcome(name, "refused", f"{what} vs {base_path}: this changes contract {name} v{old_version}; "
                                   f"increment {area.version_constant}, add '## {name} v{old_version + 1}' to "
                                   f"CHANGELOG.md, then rerun with --bump", counts)
            if area.version <= old_version:
                return AreaOutcome(name, "refused", f"--bump refused: {what}, but {area.version_constant} is still "
                                   f"{area.version} (the baseline's version); increment it first", counts)
            if not changelog_has(changelog, name, area.version):
                return AreaOutcome(name, "refused", f"--bump refused: {changelog} has no heading "
                                   f"'## {name} v{area.version}'; add a changelog entry first", counts)
    target = fileformat.golden_path(out_dir, name)
    changed = fileformat.write(target, new)
    return AreaOutcome(name, "written" if changed else "unchanged",
                       f"{target}: {counts['vectors']} vectors ({counts['new']} new, {counts['changed']} changed, "
                       f"{counts['removed']} removed){'' if changed else ', bytes unchanged'}", counts)


def generate(names: list[str] | None, baseline_dir: Path, out_dir: Path, bump: bool,
             changelog: Path) -> list[AreaOutcome]:
    """Generate every area in `names` (default: all registered); one outcome per area.

    An area whose module does not import is `skipped` when it was not
    named explicitly and `error` when it was.
    """
    from .. import numerics_probe
    explicit = names is not None
    flush = numerics_probe.flush_to_zero_status()
    if flush.flushing:   # the reference would write flushed bits into the contract
        return [AreaOutcome(name, "error", flush.message()) for name in (names or area_mod.area_names())]
    for stale in fileformat.clean_stale_temps(out_dir):   # a SIGKILLed generate's temp file
        print(f"removed stale temp file {stale} (left by a killed writer)", file=sys.stderr)
    outcomes = []
    for name in (names if explicit else area_mod.area_names()):
        if name not in area_mod.AREA_MODULES:
            outcomes.append(AreaOutcome(name, "error", f"unknown golden area {name!r}; "
                                        f"known: {sorted(area_mod.AREA_MODULES)}"))
            continue
        try:
            area = area_mod.get_area(name)
        except Exception as exc:  # an area still under construction must not block the others
            msg = (f"module {area_mod.AREA_MODULES[name]} does not import "
                   f"({type(exc).__name__}: {exc})")
            outcomes.append(AreaOutcome(name, "error" if explicit else "skipped", msg))
            continue
        outcomes.append(generate_area(area, baseline_dir, out_dir, bump, changelog))
    return outcomes


def exit_code(outcomes: list[AreaOutcome]) -> int:
    statuses = {o.status for o in outcomes}
    if "error" in statuses:
        return 2
    return 1 if "refused" in statuses else 0
