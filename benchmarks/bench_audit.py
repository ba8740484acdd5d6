"""Benchmark (and threshold measurement) for `esverify audit`.

    python benchmarks/bench_audit.py            # the two timed cases
    python benchmarks/bench_audit.py --measure  # false positives / detection on site-packages
    python benchmarks/bench_audit.py --detection-only  # planted functions only (esverify hosts, stand-ins)

Case 1: this project's tree against two generated reference folders of a
few hundred files each (target: under 30 s on the 2-core dev machine).
Case 2: a generated 1,000-file tree against a generated 300-file reference,
with a few planted copies (the count found is printed, not asserted).
Times are printed with ratios against baselines measured in the same run:
reading and hashing the same files (the I/O floor), and copydetect over all
pairs without our exact prefilter (sampled, extrapolated). Nothing is
asserted here: speed is reported, never tested.

`--measure` compares code from unrelated installed packages (site-packages)
pair by pair and prints, for a grid of (threshold, min_tokens), how many
unrelated file pairs would be findings, plus the detection of planted
copies (verbatim and renamed) of functions of various sizes.
"""
from __future__ import annotations

import argparse
import hashlib
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from esverify.audit import similarity, sources  # noqa: E402
from esverify.audit.corpus import IDIOM_K  # noqa: E402
from esverify.audit.run import AuditOptions, run_audit, write  # noqa: E402

WORDS = ("alpha beta gamma delta omega sigma theta kappa lambda mu rho tau phi chi psi zeta eta iota "
         "node edge graph queue stack frame slot buffer window count total limit scale offset index "
         "value key item entry record batch chunk block layer cell grid point vector matrix").split()


def _ident(rng: random.Random) -> str:
    return "_".join(rng.sample(WORDS, rng.randint(1, 3)))


OPS = ("+", "-", "*", "/", "//", "%", "**", "&", "|", "^", "<<", ">>", "<", ">", "==", "!=", "<=", ">=", "and", "or")


def _expr(rng: random.Random, names: list[str], depth: int = 0) -> str:
    """A random expression: names, attribute chains, calls, literals, operators."""
    kind = rng.randrange(8 if depth < 2 else 4)
    if kind == 0:
        return rng.choice(names)
    if kind == 1:
        return str(rng.randint(0, 10 ** rng.randint(1, 6)))
    if kind == 2:
        return ".".join([rng.choice(names)] + [_ident(rng) for _ in range(rng.randint(1, 3))])
    if kind == 3:
        return repr(" ".join(rng.sample(WORDS, rng.randint(1, 3))))
    if kind in (4, 5):
        return f"{_expr(rng, names, depth + 1)} {rng.choice(OPS)} {_expr(rng, names, depth + 1)}"
    if kind == 6:
        args = [_expr(rng, names, depth + 1) for _ in range(rng.randint(0, 3))]
        if rng.random() < 0.4:
            args.append(f"{_ident(rng)}={_expr(rng, names, depth + 1)}")
        return f"{_ident(rng)}({', '.join(args)})"
    brackets = rng.choice(("[]", "()", "{}"))
    inner = ", ".join(_expr(rng, names, depth + 1) for _ in range(rng.randint(1, 3)))
    return f"{brackets[0]}{inner}{',' if brackets == '()' else ''}{brackets[1]}"


def _statement(rng: random.Random, depth: int, names: list[str]) -> list[str]:
    pad = "    " * depth
    a = rng.choice(names)

    def block():
        return [ln for _ in range(rng.randint(1, 3)) for ln in _statement(rng, depth + 1, names)]
    kind = rng.randrange(12 if depth < 2 else 6)
    if kind == 0:
        return [f"{pad}{a} = {_expr(rng, names)}"]
    if kind == 1:
        return [f"{pad}{a} {rng.choice(('+=', '-=', '*=', '|='))} {_expr(rng, names)}"]
    if kind == 2:
        return [f"{pad}{_ident(rng)}({_expr(rng, names)}, {_expr(rng, names)})"]
    if kind == 3:
        return [f"{pad}assert {_expr(rng, names)}, {_expr(rng, names)}"]
    if kind == 4:
        return [f"{pad}{a}[{_expr(rng, names)}] = {_expr(rng, names)}"]
    if kind == 5:
        return [f"{pad}{a}, {rng.choice(names)} = {_expr(rng, names)}, {_expr(rng, names)}"]
    if kind == 6:
        return [f"{pad}for {a} in {_expr(rng, names)}:", *block()]
    if kind == 7:
        return [f"{pad}if {_expr(rng, names)}:", *block(), f"{pad}else:", *block()]
    if kind == 8:
        return [f"{pad}while {_expr(rng, names)}:", *block(), f"{pad}    break"]
    if kind == 9:
        return [f"{pad}try:", *block(), f"{pad}except {rng.choice(('KeyError', 'ValueError', 'OSError'))}:",
                *block()]
    if kind == 10:
        return [f"{pad}with {_expr(rng, names)} as {a}:", *block()]
    return [f"{pad}{a} = [{_expr(rng, names)} for {rng.choice(names)} in {_expr(rng, names)}]"]


def gen_function(rng: random.Random, n_statements: int) -> str:
    names = [_ident(rng) for _ in range(6)]
    args = ", ".join(names[:rng.randint(1, 4)])
    lines = [f"def {_ident(rng)}({args}):", f'    """{" ".join(rng.choices(WORDS, k=rng.randint(5, 14)))}."""']
    for _ in range(n_statements):
        lines += _statement(rng, 1, names)
    lines.append(f"    return {rng.choice(names)}")
    return "\n".join(lines) + "\n"


def gen_module(rng: random.Random, n_functions: int) -> str:
    head = ["import math", "import os", "", ""]
    return "\n".join(head) + "\n\n".join(gen_function(rng, rng.randint(3, 8)) for _ in range(n_functions))


def gen_folder(path: Path, n_files: int, seed: int, plant_from: Path | None = None, plants: int = 0) -> list[str]:
    """Write `n_files` generated files (python, some shell and markdown); with
    `plant_from`, `plants` python files each get one function copied from
    there. Returns the planted file names."""
    rng = random.Random(seed)
    path.mkdir(parents=True, exist_ok=True)
    planted = []
    donors = sorted(plant_from.rglob("*.py")) if plant_from else []
    for i in range(n_files):
        sub = path / f"pkg{i % 7}"
        sub.mkdir(exist_ok=True)
        if i % 20 == 19:
            (sub / f"run_{i}.sh").write_text("#!/usr/bin/env bash\n# generated\nset -e\n"
                                              + "\n".join(f"echo {_ident(rng)} {rng.randint(0, 999)}"
                                                          for _ in range(8)) + "\n")
        elif i % 20 == 18:
            (sub / f"notes_{i}.md").write_text("# notes\n\n" + " ".join(rng.choices(WORDS, k=120)) + "\n")
        else:
            text = gen_module(rng, rng.randint(2, 5))
            if donors and len(planted) < plants and i % 97 == 3:
                donor = donors[len(planted) % len(donors)].read_text()
                fn = donor[donor.index("def "):]
                fn = fn[:fn.index("\ndef ", 1) + 1] if "\ndef " in fn[1:] else fn
                text += "\n\n" + fn
                planted.append(f"pkg{i % 7}/mod_{i}.py")
            (sub / f"mod_{i}.py").write_text(text)
    return planted


def _time(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def io_floor(folders) -> float:
    def read_all():
        for folder in folders:
            for p in Path(folder).rglob("*"):
                if p.is_file() and ".git" not in p.parts:
                    hashlib.sha256(p.read_bytes()).hexdigest()
    return _time(read_all)[0]


def case(label: str, opts: AuditOptions, out: Path, folders) -> dict:
    seconds, result = _time(lambda: run_audit(opts))
    write_s, _ = _time(lambda: write(result, out, ["json"]))
    floor = io_floor(folders)
    summary = result.sections["summary"].set_index("section")
    print(f"{label}: {seconds:.1f} s audit + {write_s:.1f} s report write; read+hash floor {floor:.2f} s "
          f"(ratio {seconds / floor:.0f}x); similarity: {summary.loc['similarity', 'note']}; "
          f"findings {result.findings}")
    return {"seconds": seconds, "result": result}


def allpairs_baseline(tree: Path, ref: Path, sample: int = 60) -> None:
    """copydetect over all pairs (no prefilter) for a sample of tree files, extrapolated."""
    tree_e = [e for e in sources.walk_entries(tree, "tree") if e.kind == "code"]
    ref_e = [e for e in sources.walk_entries(ref, "ref") if e.kind == "code"]
    rng = random.Random(0)
    picked = rng.sample(tree_e, min(sample, len(tree_e)))
    tfp = [similarity.fingerprint(e) for e in picked]
    rfp = [("ref", similarity.fingerprint(e)) for e in ref_e]
    fast, _ = _time(lambda: similarity.compare(tfp, rfp))
    slow, _ = _time(lambda: similarity.compare(tfp, rfp, prefilter=False))
    scale = len(tree_e) / len(picked)
    print(f"  compare stage, {len(picked)} sampled tree files x {len(rfp)} ref files: prefiltered {fast:.2f} s, "
          f"all pairs {slow:.2f} s (x{slow / max(fast, 1e-9):.0f}); extrapolated to {len(tree_e)} files: "
          f"{fast * scale:.1f} s vs {slow * scale:.1f} s")


def bench() -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-audit-"))
    try:
        ref_a, ref_b = work / "ref_a", work / "ref_b"
        gen_folder(ref_a, 300, seed=1)
        gen_folder(ref_b, 300, seed=2)
        case("case 1: project tree vs 2 x 300-file generated references",
             AuditOptions(tree=ROOT, refs=[ref_a, ref_b]), work / "out1", [ROOT, ref_a, ref_b])
        tree = work / "tree1000"
        planted = gen_folder(tree, 1000, seed=3, plant_from=ref_a, plants=8)
        r = case("case 2: generated 1,000-file tree vs 300-file generated reference",
                 AuditOptions(tree=tree, refs=[ref_a]), work / "out2", [tree, ref_a])
        sim = r["result"].sections["similarity"]
        found = set(sim[sim["status"] == "finding"]["tree_file"])
        print(f"  planted copies found: {len(found & set(planted))} of {len(planted)}; "
              f"other findings: {len(found - set(planted))}")
        for name in sorted(set(planted) - found):
            rows = sim[sim["tree_file"] == name]
            best = int(rows["longest_region_tokens"].max()) if len(rows) else 0
            print(f"  missed {name}: best copied region {best} tokens (< min_tokens "
                  f"{similarity.DEFAULT_MIN_TOKENS} or listing floor)")
        allpairs_baseline(tree, ref_a)
    finally:
        shutil.rmtree(work, ignore_errors=True)


# -- threshold measurement ------------------------------------------------------------

def _site_packages() -> Path:
    import sysconfig
    return Path(sysconfig.get_paths()["purelib"])


def _corpus(pkg: str, limit: int | None = None, seed: int = 0) -> list[Path]:
    base = _site_packages() / pkg
    files = sorted(p for p in base.rglob("*.py") if "_vendor" not in p.parts)
    if limit and len(files) > limit:
        files = sorted(random.Random(seed).sample(files, limit))
    return files


class _Doc:
    def __init__(self, entry):
        self.entry = entry


def _entries(paths):
    out = []
    for p in paths:
        e = sources.read_path("corpus", p.parent, p.name)
        if e.kind == "code":
            e.path = str(p)
            out.append(e)
    return out


def _fps(paths):
    out = []
    for p in paths:
        e = sources.read_path("corpus", p.parent, p.name)
        if e.kind == "code":
            e.path = str(p)
            out.append(similarity.fingerprint(e))
    return out


def measure(text_only: bool = False) -> None:
    import pandas as pd
    own = [ROOT / r for r in (sources.git(ROOT, "ls-files", "--cached", "--others", "--exclude-standard") or "")
           .splitlines() if r.endswith(".py") and not r.startswith("tests/fixtures/audit")]
    corpora = {
        "esverify": own, "torch.optim+nn": [p for p in _corpus("torch") if "/optim/" in str(p)
                                             or "/nn/modules/" in str(p)],
        "hypothesis": _corpus("hypothesis"), "_pytest": _corpus("_pytest"), "numpy200": _corpus("numpy", 200),
        "click+jinja2": _corpus("click") + _corpus("jinja2"),
        "jsonschema+referencing": _corpus("jsonschema") + _corpus("referencing"),
        "networkx300": _corpus("networkx", 300), "sympy300": _corpus("sympy", 300), "numba200": _corpus("numba", 200),
    }
    pairs = [("esverify", "torch.optim+nn"), ("esverify", "hypothesis"), ("esverify", "numpy200"),
             ("hypothesis", "_pytest"), ("click+jinja2", "jsonschema+referencing"), ("networkx300", "sympy300"),
             ("numba200", "numpy200")]
    cache: dict = {}
    if text_only:
        for name in {n for pair in pairs for n in pair}:
            cache[name] = [_Doc(e) for e in _entries(corpora[name])]
        text_measure(cache, pairs)
        return
    frames = []
    for a, b in pairs:
        for name in (a, b):
            if name not in cache:
                cache[name] = _fps(corpora[name])
        frame, stats = similarity.compare(cache[a], [("r", f) for f in cache[b]], threshold=0.01, min_tokens=40,
                                          list_floor=1.0)
        frame["max_similarity"] = frame[["similarity_tree", "similarity_ref"]].max(axis=1)
        frame["corpus"] = f"{a} vs {b} ({stats['pairs']} pairs)"
        frames.append(frame)
    allf = pd.concat(frames)
    grid = []
    for mt in (75, 100, 125, 150, 200):
        for th in (0.02, 0.05, 0.1, 0.2, 0.5):
            hit = allf[(allf["longest_region_tokens"] >= mt) & (allf["max_similarity"] >= th)]
            grid.append({"min_tokens": mt, "threshold": th, "false positives": len(hit),
                         **{c.split(" (")[0]: int((hit["corpus"] == c).sum()) for c in allf["corpus"].unique()}})
    print("unrelated file pairs flagged (finding = max similarity >= threshold AND copied region >= "
          "min_tokens):")
    print(pd.DataFrame(grid).to_string(index=False))
    flagged = allf[(allf["longest_region_tokens"] >= similarity.DEFAULT_MIN_TOKENS)
                   & (allf["max_similarity"] >= similarity.DEFAULT_THRESHOLD)].copy()
    flagged["tree_file"] = flagged["tree_file"].str.split("site-packages/").str[-1]
    flagged["ref_file"] = flagged["ref_file"].str.split("site-packages/").str[-1]
    print(f"\npairs flagged at the defaults (threshold {similarity.DEFAULT_THRESHOLD}, "
          f"min_tokens {similarity.DEFAULT_MIN_TOKENS}):")
    print(flagged[["tree_file", "ref_file", "max_similarity", "longest_region_tokens", "tree_lines",
                   "ref_lines"]].to_string(index=False))
    print("\ntotal unrelated pairs:", sum(int(c.split("(")[1].split()[0]) for c in allf["corpus"].unique()))
    detection(cache)
    detection_standins(cache)
    text_measure(cache, pairs)


def text_measure(cache, pairs) -> None:
    """Longest shared word runs in comments/docstrings between unrelated corpora."""
    import pandas as pd
    from esverify.audit import text
    frames = []
    for a, b in pairs:
        frame, _ = text.compare([f.entry for f in cache[a]], [("r", f.entry) for f in cache[b]],
                                min_words=10, list_floor=1.0)
        frame["corpus"] = f"{a} vs {b}"
        frames.append(frame)
    allf = pd.concat(frames)
    rows = [{"min_words": mw, "pairs flagged": int((allf["longest_run_words"] >= mw).sum()),
             **{c: int(((allf["corpus"] == c) & (allf["longest_run_words"] >= mw)).sum())
                for c in allf["corpus"].unique()}} for mw in (15, 20, 25, 30, 40, 60)]
    print("\ntext pass: unrelated file pairs with a shared run of at least min_words normalised words:")
    print(pd.DataFrame(rows).to_string(index=False))
    top = allf.sort_values("longest_run_words", ascending=False).head(8)
    print(top[["corpus", "tree_file", "ref_file", "longest_run_words", "tree_lines"]].to_string(index=False))


def _planted_functions(cache, trials: int = 120, seed: int = 7):
    """(donor fingerprint, dedented function source, ast node) drawn as `detection` draws them."""
    import ast
    import textwrap
    rng = random.Random(seed)
    donors = [f for f in cache["hypothesis"]]
    out = []
    for _ in range(trials):
        donor = rng.choice(donors)
        try:
            tree = ast.parse(donor.entry.text)
        except SyntaxError:
            continue
        fns = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
        if not fns:
            continue
        fn = rng.choice(fns)
        src = ast.get_source_segment(donor.entry.text, fn)
        if src:
            out.append((donor, textwrap.dedent(src), fn, rng))
    return out


def detection_standins(cache) -> None:
    """Interface-aware detection in the stand-ins: hypothesis functions planted into every
    stand-in file the interface data lists, against a reference made of that file's interface only
    (tests/audit_interface_refs.py) plus the original function. Found: the pair is a finding at the
    defaults AND a `not_interface` run lies in the planted lines. Control: the same pairs without a
    plant must be `interface`."""
    import ast
    import pandas as pd
    sys.path.insert(0, str(ROOT / "tests"))
    import audit_interface_refs as gen
    from esverify.audit import corpus, interface
    data = interface.load(interface.default_path())
    base = corpus.stdlib(IDIOM_K)
    hosts = []
    for path in sorted((ROOT / "tests" / "standins").rglob("*.py")):
        rel = path.relative_to(ROOT / "tests" / "standins").as_posix().split("/", 1)[-1]
        names = interface.references_in([rel], data)
        entry = next(((n, e) for n in names for e in data[n]["files"]
                      if interface._matches(rel, e["file"])), None)
        if entry:
            hosts.append((path, entry))
    rows, control = [], []
    for n, (donor, src, fn, rng) in enumerate(_planted_functions(cache)):
        path, (name, entry) = hosts[n % len(hosts)]
        host_text = path.read_text()
        ref_text = gen.module_source(name, entry)
        for mode in ("verbatim", "renamed"):
            body = src
            if mode == "renamed":
                for ident in sorted({x.id for x in ast.walk(fn) if isinstance(x, ast.Name)}, key=len, reverse=True):
                    if len(ident) > 2:
                        body = body.replace(ident, f"renamed_{abs(hash(ident)) % 997}")
            first = host_text.count("\n") + 3
            tree_e = sources.classify("plant", f"plant/{path.name}", (host_text + "\n\n" + body + "\n").encode())
            ref_e = sources.classify("ref", entry["file"], (ref_text + "\n\n" + src + "\n").encode())
            frame, _ = similarity.compare([similarity.fingerprint(tree_e)], [("r", similarity.fingerprint(ref_e))],
                                          interface=interface.Classifier(data, corpus=base))
            hit = frame[frame["status"] == "finding"]
            # the last line of each non-interface run of the tree side ("tree L:C-L:C `...` (N tokens)")
            lines = [int(x.split(" ")[1].split("-")[1].split(":")[0]) for x in
                     (hit.iloc[0]["not_interface"].split("; ") if len(hit) else []) if x.startswith("tree ")]
            rows.append({"mode": mode, "fn_lines": src.count("\n") + 1,
                         "found": bool(len(hit)) and any(line >= first for line in lines)})
        if n < len(hosts):
            tree_e = sources.classify("plant", f"plant/{path.name}", host_text.encode())
            ref_e = sources.classify("ref", entry["file"], ref_text.encode())
            frame, _ = similarity.compare([similarity.fingerprint(tree_e)], [("r", similarity.fingerprint(ref_e))],
                                          interface=interface.Classifier(data, corpus=base))
            control.append({"stand-in": path.name, "statuses": ",".join(frame["status"]) or "(no row)"})
    frame = pd.DataFrame(rows)
    frame["size"] = pd.cut(frame["fn_lines"], [0, 5, 10, 20, 40, 10_000],
                           labels=["1-5", "6-10", "11-20", "21-40", ">40"])
    table = (frame.groupby(["mode", "size"], observed=True)["found"].agg(["size", "sum"])
             .rename(columns={"size": "n", "sum": "found@125/0.05 (interface-aware)"}))
    print("\ndetection of hypothesis functions planted into stand-ins, against their interface plus the "
          "function (defaults, interface-aware):")
    print(table.to_string())
    print("control, the same stand-ins without a plant (expected: interface or below threshold only):")
    print(pd.DataFrame(control).to_string(index=False))


def detection(cache) -> None:
    """Plant functions of known size from one corpus into files of another, measure detection."""
    import ast
    import pandas as pd
    from esverify.audit import corpus, interface
    classifier = interface.Classifier(interface.load(interface.default_path()), corpus=corpus.stdlib(IDIOM_K))
    rng = random.Random(7)
    donors = [f for f in cache["hypothesis"]]
    hosts = [f for f in cache["esverify"] if len(f.entry.text) > 2000]
    rows = []
    for trial in range(120):
        donor = rng.choice(donors)
        try:
            tree = ast.parse(donor.entry.text)
        except SyntaxError:
            continue
        fns = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
        if not fns:
            continue
        fn = rng.choice(fns)
        src = ast.get_source_segment(donor.entry.text, fn)
        if not src:
            continue
        import textwrap
        src = textwrap.dedent(src)
        host = rng.choice(hosts)
        for mode in ("verbatim", "renamed"):
            body = src
            if mode == "renamed":
                for name in sorted({n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}, key=len, reverse=True):
                    if len(name) > 2:
                        body = body.replace(name, f"renamed_{abs(hash(name)) % 997}")
            text = host.entry.text + "\n\n" + body + "\n"
            e = sources.classify("plant", "planted.py", text.encode())
            fp = similarity.fingerprint(e)
            frame, _ = similarity.compare([fp], [("r", donor)], threshold=0.01, min_tokens=1, list_floor=0.0)
            row = frame.iloc[0] if len(frame) else None
            # the same pair at the defaults with the shipped interface data, as `esverify audit` runs it
            audited, _ = similarity.compare([fp], [("r", donor)], interface=classifier)
            rows.append({"mode": mode, "fn_lines": src.count("\n") + 1,
                         "span": int(row["longest_region_tokens"]) if row is not None else 0,
                         "maxsim": (float(max(row["similarity_tree"], row["similarity_ref"]))
                                    if row is not None else 0.0),
                         "audited": bool((audited["status"] == "finding").any())})
    frame = pd.DataFrame(rows)
    frame["size"] = pd.cut(frame["fn_lines"], [0, 5, 10, 20, 40, 10_000],
                           labels=["1-5", "6-10", "11-20", "21-40", ">40"])
    out = []
    for (mode, size), g in frame.groupby(["mode", "size"], observed=True):
        entry = {"mode": mode, "function lines": size, "n": len(g)}
        for mt, th in ((100, 0.05), (125, 0.05), (150, 0.05), (150, 0.2), (150, 0.5)):
            entry[f"found@{mt}/{th}"] = int(((g["span"] >= mt) & (g["maxsim"] >= th)).sum())
        entry["found (audit, interface-aware)"] = int(g["audited"].sum())
        out.append(entry)
    print("\ndetection of functions planted from hypothesis into esverify files (host > 2 kB):")
    print(pd.DataFrame(out).to_string(index=False))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--measure", action="store_true", help="run the threshold measurement instead")
    parser.add_argument("--text-only", action="store_true", help="with --measure: only the text pass")
    parser.add_argument("--detection-only", action="store_true",
                        help="only the planted-function detection (esverify hosts and stand-ins)")
    parser.add_argument("--idiom-k", type=int, default=None,
                        help="idiom window in filtered tokens (default: the audit's, esverify.audit.corpus.IDIOM_K)")
    args = parser.parse_args()
    if args.idiom_k:
        IDIOM_K = args.idiom_k
    if args.detection_only:
        own = [ROOT / r for r in (sources.git(ROOT, "ls-files", "--cached", "--others", "--exclude-standard") or "")
               .splitlines() if r.endswith(".py") and not r.startswith("tests/fixtures/audit")]
        cache = {"hypothesis": _fps(_corpus("hypothesis")), "esverify": _fps(own)}
        detection(cache)
        detection_standins(cache)
    elif args.measure:
        measure(text_only=args.text_only)
    else:
        bench()
