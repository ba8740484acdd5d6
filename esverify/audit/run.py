"""Run the audit sections over the collected sources and build the report.

`run_audit(AuditOptions)` returns an `AuditResult` (sections as pandas
frames, metadata, finding count); `write(result, out, formats)` writes it
through `esverify.report.write_report` (atomic). No printing here: the
click command in `cli.py` owns the terminal.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from . import corpus, identity, imports, interface, provenance, similarity, sources, text

SKIP_NO_REF = "skipped: no --ref given (sections 1-3 need a reference clone)"
READABILITY_COLUMNS = ["status", "origin", "path", "kind", "size", "reason"]


@dataclass
class AuditOptions:
    """What to scan and with which parameters (see `esverify audit --help`)."""

    tree: Path | None = None
    wheels: list[Path] = field(default_factory=list)
    history: bool = False
    refs: list[Path] = field(default_factory=list)
    threshold: float = similarity.DEFAULT_THRESHOLD
    min_tokens: int = similarity.DEFAULT_MIN_TOKENS
    k: int = similarity.DEFAULT_K
    window: int = similarity.DEFAULT_WINDOW
    ngram: int = text.DEFAULT_NGRAM
    min_words: int = text.DEFAULT_MIN_WORDS
    max_file_bytes: int = sources.DEFAULT_MAX_FILE_BYTES
    #: the interface data (docs/references.md §5.3); None: the one esverify ships (`interface.default_path`)
    interfaces: Path | None = None


@dataclass
class AuditResult:
    """sections: report name -> frame (summary first); findings: count that makes exit 1;
    review: import-boundary items listed for review (informational, exit 0)."""

    sections: dict[str, pd.DataFrame]
    metadata: dict
    findings: int
    review: int


def _ref_label(n: int, path: Path) -> str:
    return f"ref{n}:{path.name}"


def refs_inside_tree(tree: Path | None, refs) -> list[str]:
    """A warning for each --ref that lies inside the audited tree: its files are the tree's too, so
    every one is found as a copy of itself (findings kept: the tree does hold those files)."""
    if tree is None:
        return []
    root = Path(tree).resolve()
    return [f"--ref {ref} lies inside the audited tree {tree}: its files are audited as the tree's too, so "
            "each is found as a copy of itself; pass a clone outside the tree to audit the tree against it"
            for ref in refs if Path(ref).resolve().is_relative_to(root)]


def interface_note(count: int, paths: list, data: dict, classifier, has_ref: bool) -> dict:
    """What `interface` means in this report, where its data came from, which references each clone is
    and which base-code corpus named the idioms (metadata `interface`)."""
    if not has_ref:
        return {"reason": None}
    where = "; ".join(f"{path} (sha256 {hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else 'missing'})"
                      for path in paths)
    base = classifier.corpus.describe() if classifier.corpus is not None else None
    reason = (f"{count} similarity pair(s) share only interface and idioms and are listed as `interface`, not "
              "findings: a finding needs a copied region holding >= min_tokens tokens of the audited file that "
              "are neither interface (declarations the interface data lists: imports, def/class headers with "
              "their parameters and defaults, argparse flags and their parser, module constants, dataclass "
              "fields; and by kind: imports below the top level, a constructor's stores of its own parameters, "
              "third-party calls made of the package's names, keyword names and literals) nor idioms (shapes "
              f"of {corpus.IDIOM_K} tokens that occur in the base-code corpus); the reference's side is "
              f"evidence only. Interface data: {where}; base code: {base}; docs/audit.md, 'Interface regions'.")
    return {"reason": reason, "data": where, "base code": base,
            "base code, briefly": classifier.corpus.brief() if classifier.corpus is not None else None,
            "references in the data": ", ".join(data) or None,
            "clones recognised": {label: ", ".join(names) or "none"
                                  for label, names in classifier.recognised().items()} or None}


FINDING_COLUMNS = ["section", "file", "ref_file", "similarity", "our_tokens", "our_lines"]


def finding_rows(sections: dict) -> pd.DataFrame:
    """One row per finding of every section: the audited file, the reference file (if any), the similarity
    (the larger way), the audited file's own tokens and their lines (similarity), or the words and lines (text)."""
    rows = []
    for name, frame in sections.items():
        if name not in ("similarity", "text", "identity", "imports", "readability") or not len(frame):
            continue
        for r in frame[frame["status"] == "finding"].to_dict("records"):
            row = {"section": name, "file": r.get("tree_file") or r.get("path") or r.get("file"),
                   "ref_file": f"{r['ref']} {r['ref_file']}" if r.get("ref") else None,
                   "similarity": None, "our_tokens": None, "our_lines": None}
            if name == "similarity":
                row.update(similarity=max(r["similarity_tree"], r["similarity_ref"]),
                           our_tokens=r.get("our_tokens") if pd.notna(r.get("our_tokens")) else
                           r["longest_region_tokens"],
                           our_lines=r.get("our_lines") or r["tree_lines"])
            elif name == "text":
                row.update(our_tokens=r["longest_run_words"], our_lines=r["tree_lines"])
            elif name == "imports":
                row.update(our_lines=str(r["line"]))
            rows.append(row)
    return pd.DataFrame(rows, columns=FINDING_COLUMNS)


def headline(findings: pd.DataFrame, interface_pairs: int, base: str | None) -> str:
    """The report's `reason`: every file with a finding, by name (the first screen of every format)."""
    tail = f"{interface_pairs} pair(s) share only interface and idioms (listed, not findings)" \
        + (f"; base code: {base}" if base else "")
    if not len(findings):
        return f"no finding; {tail}"
    files = list(dict.fromkeys(findings["file"].map(str)))
    return f"{len(findings)} finding(s) in {len(files)} file(s): {', '.join(files)}; {tail}"


def collect(opts: AuditOptions):
    """(targets, refs, provenance rows): every FileEntry to audit and the references'.

    Raises ValueError (a usage error, exit 2) for an unreadable archive, a
    --history without git, and a tree, wheel or --ref holding no code file
    (an empty reference would make every comparison pass vacuously).
    """
    targets, prov = [], []
    bound = opts.max_file_bytes
    if opts.tree is not None:
        tree = sources.tree_entries(opts.tree, max_bytes=bound)
        _require_code(tree, f"--tree {opts.tree}")
        targets += tree
        prov.append(provenance.describe_root("tree", opts.tree))
        if opts.history:
            seen = {e.sha256 for e in tree if e.sha256}
            targets += sources.history_entries(opts.tree, seen, max_bytes=bound)
    for wheel in opts.wheels:
        entries = sources.archive_entries(wheel, max_bytes=bound)
        _require_code(entries, f"--wheel {wheel}")
        targets += entries
        prov.append(provenance.describe_archive(wheel, entries))
    refs = []
    for n, ref in enumerate(opts.refs, 1):
        label = _ref_label(n, ref)
        entries = sources.walk_entries(ref, label, max_bytes=bound)
        _require_code(entries, f"--ref {ref}")
        refs += [(label, e) for e in entries]
        prov.append(provenance.describe_root(f"reference {label}", ref))
    return targets, refs, prov


def _require_code(entries, what: str) -> None:
    """ValueError naming `what` when none of `entries` is a code file by name (readable or not)."""
    if not any(e.language is not None and e.kind != "symlink" for e in entries):
        raise ValueError(f"{what}: no code files (.py, .sh, notebooks, scripts with a python/sh shebang) "
                         f"among {len(entries)} files; nothing to compare")


def _scanned_by(e, target: bool, has_ref: bool, unlexed: set) -> str:
    """Which sections actually read `e` in this run (the manifest must not claim more)."""
    done = []
    if has_ref:
        if e.kind == "code" and (e.origin, e.path) not in unlexed:
            done.append("similarity")
        if e.kind in ("code", "prose") and not e.is_licence:
            done.append("text")
        if e.kind in ("code", "prose", "data", "binary") or (e.kind == "too-large" and e.sha256):
            done.append("identity")
    if target and imports.area_of(e.plain_path) and e.kind == "code" and e.language == "python":
        done.append("imports")
    return ", ".join(done) or "none"


def _verdict(frame: pd.DataFrame | None, skipped: bool) -> tuple[str, int]:
    if skipped:
        return "skipped", 0
    n = int((frame["status"] == "finding").sum()) if len(frame) else 0
    return ("FINDING" if n else "pass"), n


def run_audit(opts: AuditOptions) -> AuditResult:
    """Run all five sections; see the package docstring for what each checks."""
    started = dt.datetime.now(dt.timezone.utc)
    t0 = time.perf_counter()
    has_ref = bool(opts.refs)
    interface_paths = [Path(opts.interfaces)] if opts.interfaces else interface.default_paths()
    interface_data, interface_label = {}, ", ".join(str(p) for p in interface_paths)
    if has_ref:   # ValueError: a usage error (exit 2), before any work
        interface_data = interface.load(interface_paths[0]) if opts.interfaces else interface.load_shipped()
    targets, refs, prov_rows = collect(opts)
    base = corpus.stdlib() if has_ref else None   # indexed once per interpreter, then read from the cache
    classifier = interface.Classifier(interface_data, interface_label, corpus=base)
    everything = targets + [r for _, r in refs]
    skipped_rows = [{"origin": e.origin, "path": e.path, "reason": e.error}
                    for e in everything if e.kind in ("binary", "symlink", *sources.UNREADABLE_KINDS)]
    # a file the audit could not read is a finding, never a silent pass
    readability = pd.DataFrame(
        [{"status": "finding", "origin": e.origin, "path": e.path, "kind": e.kind, "size": e.size,
          "reason": e.error} for e in everything if e.kind in sources.UNREADABLE_KINDS],
        columns=READABILITY_COLUMNS)

    # 1-3. similarity, text, identity
    if has_ref:
        sim, txt, ident, stats = _compare_with_refs(opts, targets, refs, classifier, skipped_rows)
    else:
        sim = pd.DataFrame(columns=similarity.COLUMNS)
        txt = pd.DataFrame(columns=text.COLUMNS)
        ident = pd.DataFrame(columns=identity.COLUMNS)
        stats = {}

    # 4. import boundary
    names, excluded = imports.reference_module_names([e for _, e in refs])
    imp = imports.scan(targets, names)

    # 5. provenance and manifest
    prov = pd.DataFrame(prov_rows)
    manifest = _manifest(targets, refs, has_ref, skipped_rows)
    skipped = pd.DataFrame(skipped_rows, columns=["origin", "path", "reason"])
    tools = provenance.tool_versions()
    params = _parameters(opts, base, names, excluded)
    tools_frame = pd.DataFrame([{"item": k, "kind": "tool", "value": v} for k, v in tools.items()]
                               + [{"item": k, "kind": "parameter", "value": v} for k, v in params.items()])

    summary_rows, total = _summary_rows({"similarity": sim, "text": txt, "identity": ident, "imports": imp,
                                         "readability": readability}, has_ref, stats, everything, targets)
    summary_rows.append({"section": "provenance", "verdict": "info", "findings": 0,
                         "note": f"{len(manifest)} files in the manifest; {len(skipped)} skipped"})
    finished = dt.datetime.now(dt.timezone.utc)
    metadata = {
        "tool": "esverify audit", "started_utc": started.isoformat(timespec="seconds"),
        "finished_utc": finished.isoformat(timespec="seconds"),
        "duration_s": round(time.perf_counter() - t0, 3),
        "tree": str(opts.tree) if opts.tree else None, "wheels": [str(w) for w in opts.wheels],
        "history": opts.history, "refs": [str(r) for r in opts.refs],
        "verdict": "FINDING" if total else "pass", "findings": total,
        "parameters": params, "tools": tools, "statement": provenance.STATEMENT,
        "warnings": refs_inside_tree(opts.tree, opts.refs),
        "interface": interface_note(stats.get("similarity", {}).get("interface", 0), interface_paths,
                                    interface_data, classifier, has_ref),
    }
    sections = {"summary": pd.DataFrame(summary_rows), "similarity": sim, "text": txt, "identity": ident,
                "imports": imp, "readability": readability, "provenance": prov, "tools": tools_frame, "manifest": manifest,
                "skipped": skipped}
    # second, after the summary: every file with a finding on the first screen of each format
    found = finding_rows(sections)
    sections = {"summary": sections.pop("summary"), "findings": found, **sections}
    metadata["reason"] = headline(found, stats.get("similarity", {}).get("interface", 0),
                                  base.brief() if base else None)
    review_total = int((imp["status"] == "review").sum()) if len(imp) else 0
    return AuditResult(sections, metadata, total, review_total)


def _compare_with_refs(opts: AuditOptions, targets, refs, classifier, skipped_rows: list):
    """Sections 1-3 against the reference clones: (similarity, text, identity frames, their stats).

    A file the lexer cannot fingerprint is added to `skipped_rows` and the audit goes on.
    """
    def fps(entries):
        out = []
        for label, e in entries:
            if e.kind != "code":
                continue
            try:
                out.append((label, similarity.fingerprint(e, opts.k, opts.window)))
            except Exception as exc:  # a lexer failure must not end the audit
                skipped_rows.append({"origin": e.origin, "path": e.path,
                                     "reason": f"not fingerprinted: {type(exc).__name__}: {exc}"})
        return out
    stats: dict = {}
    tree_fps = [f for _, f in fps([(e.origin, e) for e in targets])]
    ref_fps = fps(refs)
    sim, stats["similarity"] = similarity.compare(tree_fps, ref_fps, threshold=opts.threshold,
                                                  min_tokens=opts.min_tokens, interface=classifier)
    stats["similarity"].update(tree_code_files=len(tree_fps), ref_code_files=len(ref_fps))
    txt, stats["text"] = text.compare([e for e in targets if e.kind in ("code", "prose")],
                                      [(lab, e) for lab, e in refs if e.kind in ("code", "prose")],
                                      ngram=opts.ngram, min_words=opts.min_words)
    ident = identity.compare(targets, refs)
    return sim, txt, ident, stats


def _manifest(targets, refs, has_ref: bool, skipped_rows) -> pd.DataFrame:
    """Every file seen, audited or reference, with its hash and the sections that scanned it."""
    unlexed = {(r["origin"], r["path"]) for r in skipped_rows if r["reason"].startswith("not fingerprinted")}
    return pd.DataFrame(
        [{"origin": e.origin, "path": e.path, "kind": e.kind, "size": e.size, "sha256": e.sha256,
          "scanned_by": _scanned_by(e, target, has_ref, unlexed)}
         for target, group in ((True, targets), (False, [r for _, r in refs])) for e in group],
        columns=["origin", "path", "kind", "size", "sha256", "scanned_by"])


def _parameters(opts: AuditOptions, base, names, excluded) -> dict:
    """The settings the verdict depends on, as the report's `tools` section lists them."""
    return {"threshold": opts.threshold, "min_tokens": opts.min_tokens, "k (copydetect noise threshold)": opts.k,
            "winnowing window": opts.window, "text ngram words": opts.ngram, "text min run words": opts.min_words,
            "trivial identity bytes": identity.TRIVIAL_BYTES,
            "idiom window tokens": corpus.IDIOM_K, "idiom piece tokens (fewer than)": interface.IDIOM_MAX_TOKENS,
            "base-code corpus": base.describe() if base else None, "max file bytes": opts.max_file_bytes,
            "reference module names (built-in)": ", ".join(sorted(imports.builtin_reference_modules())),
            "reference module names (from --ref)": ", ".join(sorted(names)) or None,
            "ref names ignored (stdlib/packaging)": ", ".join(excluded) or None}


def _summary_rows(frames: dict, has_ref: bool, stats: dict, everything, targets) -> tuple[list[dict], int]:
    """The summary's row per finding section (verdict, findings, a note) and the total of findings."""
    summary_rows = []
    total = 0
    for name, frame in frames.items():
        skip = name in ("similarity", "text", "identity") and not has_ref
        verdict, n = _verdict(frame, skip)
        total += n
        note = SKIP_NO_REF if skip else _section_note(name, frame, n, stats, everything, targets)
        summary_rows.append({"section": name, "verdict": verdict, "findings": n, "note": note})
    return summary_rows, total


def _section_note(name: str, frame: pd.DataFrame, n: int, stats: dict, everything, targets) -> str:
    """The summary's note on a section that ran: what it compared or counted."""
    if name == "similarity":
        s = stats["similarity"]
        return (f"{s['tree_code_files']} x {s['ref_code_files']} code files; {s['compared']} pairs "
                f"compared; {s['interface']} share only interface and idioms")
    if name == "text":
        return f"{stats['text']['tree_documents']} x {stats['text']['ref_documents']} documents"
    if name == "identity":
        return f"{int((frame['status'] == 'trivial').sum())} trivial matches, not counted"
    if name == "readability":
        return f"{len(everything)} files; {n} unreadable or too large (each a finding)"
    review = int((frame["status"] == "review").sum()) if len(frame) else 0
    listed = int((frame["status"] == "listed").sum()) if len(frame) else 0
    scanned = sum(1 for e in targets if imports.area_of(e.plain_path) == "package"
                  and e.kind == "code" and e.language == "python")
    return f"{scanned} package files; {review} for review; {listed} oracle-area loads (child only)"


def write(result: AuditResult, out: Path, formats) -> list[Path]:
    """Write the report (atomic, esverify.report) as `audit.<ext>` under `out`."""
    from esverify.report import write_report
    return write_report(out, "audit", result.sections, result.metadata, formats=formats,
                        title="esverify clean-room audit")
