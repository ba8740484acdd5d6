"""Section 1: token-level similarity through copydetect's winnowing.

copydetect (v0.5) lexes with pygments, replaces identifiers by V/F/O and
string contents by S, drops whitespace and comments, hashes every k-gram of
the filtered text ("tokens" below are characters of that filtered text,
copydetect's own unit) and keeps winnowed fingerprints. `compare_files`
then gives, per pair, the shared tokens, the similarity both ways (shared /
fingerprint-covered tokens of each file) and the copied character slices,
which we turn into line ranges on both sides.

Every file is fingerprinted once. Pairs are compared only when an inverted
index of reference fingerprints says they can reach the listing floor:
(1) the tree side's shared tokens are the total length of slices of width
k around its shared fingerprint positions, so at most k x (number of such
positions); (2) the tree side's best region, computed from exactly the
positions copydetect would use, bounds the pair's region (the smaller of
both sides'). Neither stage can drop a pair copydetect would flag; a
hypothesis test checks the prefiltered result equals the all-pairs one.

A finding needs max(similarity both ways) >= threshold AND a copied region
of >= min_tokens shared tokens, a region being copydetect's copied slices
merged across gaps of at most `gap` tokens, on both sides. The region
(rather than the total) keeps scattered idioms (imports, argument parsing,
`for i in range(len(x))`) from adding up, and it implies the issue's "at
least a minimum of shared tokens". k-grams of at most 4 distinct filtered
characters (literal tables) are boilerplate. Defaults (threshold 0.05,
125 tokens) come from measurements in docs/audit.md: similarity is a
fraction of whole files, so a copied 30-line function inside a 600-line
module is ~5% of it; the region size is what separates copies from idioms.
"""
from __future__ import annotations

import bisect
import io
import logging
import re
import warnings
from collections import defaultdict
from dataclasses import dataclass


#: copydetect defaults: noise threshold k = 25, guarantee 25 (window 1).
DEFAULT_K = 25
DEFAULT_WINDOW = 1
DEFAULT_THRESHOLD = 0.05
DEFAULT_MIN_TOKENS = 125
#: copied slices closer than this many filtered tokens form one region.
DEFAULT_GAP = 25
#: k-grams with at most this many distinct filtered characters are boilerplate.
LOW_ENTROPY_CHARS = 4
_NEWLINE = re.compile("\n")

COLUMNS = ["status", "origin", "tree_file", "ref", "ref_file", "similarity_tree", "similarity_ref",
           "shared_tokens", "longest_region_tokens", "our_tokens", "our_lines", "tree_lines", "ref_lines",
           "interface", "not_interface", "idioms", "delimiters"]
#: row order: findings first, then interface-only pairs (evidence), then pairs listed for a human
STATUS_ORDER = {"finding": 0, "interface": 1, "below threshold": 2}


@dataclass
class Fingerprint:
    entry: object
    fp: object  # copydetect.CodeFingerprint
    line_starts: list[int]


def _drop_low_entropy(fp, k: int) -> None:
    """Treat k-grams of at most LOW_ENTROPY_CHARS distinct filtered characters
    as boilerplate, exactly as copydetect's own `boilerplate` argument
    would (hashes and their positions removed, token coverage recomputed):
    literal tables such as `"S","S","S",...` or `V,V,V,...` otherwise match
    between any two projects."""
    from copydetect.utils import get_token_coverage
    code = fp.filtered_code
    low = [h for h, idx in fp.hash_idx.items() if len(set(code[idx[0]:idx[0] + k])) <= LOW_ENTROPY_CHARS]
    for h in low:
        fp.hashes.discard(h)
        del fp.hash_idx[h]
    if low:
        fp.token_coverage = get_token_coverage(fp.hash_idx, k, len(code))


def fingerprint(entry, k: int = DEFAULT_K, window: int = DEFAULT_WINDOW,
                drop_low_entropy: bool = True) -> Fingerprint:
    """copydetect fingerprint of a code FileEntry (text from `entry.text`,
    lexer chosen by `entry.language`). Raises whatever the lexer raises;
    the caller lists such files as skipped."""
    from copydetect import CodeFingerprint
    suffix = ".py" if entry.language == "python" else ".sh"
    text = entry.text
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.ERROR))  # copydetect warns on the root logger; keep the caller's level
    try:
        fp = CodeFingerprint(f"{entry.path}{suffix}", k, window, fp=io.StringIO(text),
                             language=entry.language)
    finally:
        root.setLevel(level)
    if drop_low_entropy:
        _drop_low_entropy(fp, k)
    starts = [0] + [m.end() for m in _NEWLINE.finditer(text)]
    return Fingerprint(entry, fp, starts)


def _lines(fpr: Fingerprint, slices) -> str:
    """Character slices (2 x N array) as 1-based inclusive line ranges."""
    if len(slices) == 0 or len(slices[0]) == 0:
        return ""
    out = []
    for a, b in zip(slices[0], slices[1]):
        la = bisect.bisect_right(fpr.line_starts, int(a))
        lb = bisect.bisect_right(fpr.line_starts, max(int(b) - 1, int(a)))
        if out and la <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], lb)
        else:
            out.append([la, lb])
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in out)


def longest_region(slices, gap: int) -> int:
    """Tokens covered by the best region of copied slices, slices closer than
    `gap` filtered tokens being one region (a copy with small edits stays one
    region; scattered idioms do not add up)."""
    if len(slices) == 0 or len(slices[0]) == 0:
        return 0
    best = covered = 0
    prev_end = None
    for start, end in sorted(zip(slices[0].tolist(), slices[1].tolist())):
        if prev_end is not None and start - prev_end <= gap:
            covered += end - max(start, prev_end)
        else:
            covered = end - start
        prev_end = max(end, prev_end or end)
        best = max(best, covered)
    return int(best)


def _candidates(tf: Fingerprint, index: dict[int, list[int]], k: int, floor: int, gap: int) -> list[int]:
    """Reference indices whose pair with `tf` can reach `floor` region tokens.

    Stage 1: total shared tokens <= k x shared positions. Stage 2: the tree
    side's best region computed from exactly the positions copydetect would
    use (the tree positions of all shared hashes). A pair's region is the
    smaller of both sides', so neither stage can drop a listable pair.
    """
    import numpy as np
    from copydetect.utils import get_copied_slices
    shared: dict[int, list[int]] = defaultdict(list)
    for h in tf.fp.hashes:
        for j in index.get(h, ()):
            shared[j].append(h)
    out = []
    for j, hashes in shared.items():
        if sum(len(tf.fp.hash_idx[h]) for h in hashes) * k < floor:
            continue
        positions = np.concatenate([np.asarray(tf.fp.hash_idx[h]) for h in hashes])
        if longest_region(get_copied_slices(positions, k), gap) >= floor:
            out.append(j)
    return sorted(out)


def compare(tree_fps: list[Fingerprint], ref_fps: list[tuple[str, Fingerprint]], *,
            threshold: float = DEFAULT_THRESHOLD, min_tokens: int = DEFAULT_MIN_TOKENS,
            prefilter: bool = True, list_floor: float = 0.5, gap: int = DEFAULT_GAP,
            interface=None) -> tuple[pd.DataFrame, dict]:
    """Compare every tree fingerprint with every reference fingerprint.

    ref_fps: (reference label, Fingerprint) pairs. Rows are listed when the
    copied region reaches `list_floor * min_tokens` tokens; status is
    "finding" when both criteria hold, else "below threshold". With
    `interface` (an `esverify.audit.interface.Classifier`), a pair meeting
    both criteria is a finding only when one region of >= min_tokens tokens
    holds, in the tree file, >= min_tokens tokens that are neither interface
    nor idiom (`our_tokens`, at `our_lines`); else it is "interface" (not a
    finding). Columns `interface` (the declarations met), `not_interface`
    (the runs of other tokens of both sides, line:column and filtered form;
    the reference's side is evidence only), `idioms` (the tree side's
    base-code runs) and `delimiters` say why. Returns (frame,
    stats) with stats: pairs, compared, prefiltered_out, interface.
    """
    import pandas as pd
    from copydetect import compare_files
    from copydetect.utils import find_fingerprint_overlap, get_copied_slices
    k = tree_fps[0].fp.k if tree_fps else DEFAULT_K
    floor = max(1, int(list_floor * min_tokens))
    index: dict[int, list[int]] = defaultdict(list)
    for j, (_, rf) in enumerate(ref_fps):
        for h in rf.fp.hashes:
            index[h].append(j)
    rows, compared = [], 0
    if interface is not None:
        interface.prepare(ref_fps)
    for tf in tree_fps:
        if prefilter:
            candidates = _candidates(tf, index, k, floor, gap)
        else:
            candidates = range(len(ref_fps))
        for j in candidates:
            label, rf = ref_fps[j]
            compared += 1
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                shared, (s_tree, s_ref), (sl_tree, sl_ref) = compare_files(tf.fp, rf.fp)
            if shared < floor:
                continue
            idx_tree, idx_ref = find_fingerprint_overlap(tf.fp.hashes, rf.fp.hashes, tf.fp.hash_idx, rf.fp.hash_idx)
            longest = min(longest_region(get_copied_slices(i, k), gap) for i in (idx_tree, idx_ref))
            if longest < floor:
                continue
            found = max(s_tree, s_ref) >= threshold and longest >= min_tokens
            status, why = ("finding" if found else "below threshold"), {}
            if found and interface is not None:
                report = interface.pair(tf, label, rf, idx_tree, idx_ref, gap, min_tokens)
                status = "interface" if report.interface else "finding"
                why = {"interface": report.entries, "not_interface": report.not_interface,
                       "delimiters": report.delimiters, "idioms": report.idioms,
                       "our_tokens": report.our_tokens, "our_lines": report.our_lines}
            rows.append({"status": status, **why,
                         "origin": tf.entry.origin, "tree_file": tf.entry.path, "ref": label, "ref_file": rf.entry.path,
                         "similarity_tree": round(float(s_tree), 4),
                         "similarity_ref": round(float(s_ref), 4),
                         "shared_tokens": int(shared), "longest_region_tokens": longest,
                         "tree_lines": _lines(tf, sl_tree), "ref_lines": _lines(rf, sl_ref)})
    total = len(tree_fps) * len(ref_fps)
    frame = pd.DataFrame(rows, columns=COLUMNS)
    if len(frame):
        order = frame["status"].map(STATUS_ORDER)
        frame = (frame.assign(_order=order).sort_values(["_order", "shared_tokens"], ascending=[True, False],
                                                        kind="stable").drop(columns="_order").reset_index(drop=True))
    return frame, {"pairs": total, "compared": compared, "prefiltered_out": total - compared,
                   "interface": int((frame["status"] == "interface").sum()) if len(frame) else 0}
