"""Section 2: shared prose in comments, docstrings and prose files.

copydetect drops comments and string contents, so copied explanations
would pass the token pass unseen. Here every document is reduced to its
natural-language text (Python: comments and statement strings such as
docstrings, via `tokenize`, with a regex fallback for files this
interpreter cannot tokenize; shell: `#` comments; notebooks: markdown
cells plus code comments; prose files: all lines), normalised to
lowercase alphanumeric words each tagged with its line, and compared by
hashed word n-grams. Matches on one diagonal (same offset between the two
documents) are merged into runs; n-grams with more than 200 postings in
the references are dropped as repetitive noise. A finding is a run of at
least `min_words` consecutive shared words. The report gives line ranges,
never the words themselves (it must not quote reference text). Licence
files are left out: two projects sharing a licence text is not copying
(identity and provenance still report them).
"""
from __future__ import annotations

import io
import re
import tokenize
from collections import defaultdict


DEFAULT_NGRAM = 8
DEFAULT_MIN_WORDS = 30
#: n-grams seen more often than this in the references are boilerplate noise.
MAX_POSTINGS = 200

COLUMNS = ["status", "origin", "tree_file", "ref", "ref_file", "longest_run_words", "shared_words",
           "tree_lines", "ref_lines"]

_WORD = re.compile(r"[a-z0-9]+")
_TRIPLE = re.compile(r'("""|\'\'\')(.*?)\1', re.S)
_COMMENT = re.compile(r"(?:^|\s)#(.*)$")


def _python_pieces(text: str) -> list[tuple[int, str]]:
    """(first line, text) of each comment and statement-level string."""
    pieces = []
    try:
        prev = tokenize.NEWLINE
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                pieces.append((tok.start[0], tok.string.lstrip("#")))
            elif tok.type == tokenize.STRING and prev in (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT,
                                                          tokenize.DEDENT):
                pieces.append((tok.start[0], tok.string))
            if tok.type not in (tokenize.COMMENT, tokenize.NL):
                prev = tok.type
            elif tok.type == tokenize.NL:
                prev = tokenize.NL
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pieces = []
        for m in _TRIPLE.finditer(text):
            pieces.append((text.count("\n", 0, m.start()) + 1, m.group(2)))
        for n, line in enumerate(text.splitlines(), 1):
            m = _COMMENT.search(line)
            if m:
                pieces.append((n, m.group(1)))
    return pieces


def _shell_pieces(text: str) -> list[tuple[int, str]]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if n == 1 and line.startswith("#!"):
            continue
        m = _COMMENT.search(line)
        if m:
            out.append((n, m.group(1)))
    return out


def pieces_of(entry) -> list[tuple[int, str]]:
    """Natural-language pieces (first line, text) of a FileEntry."""
    if entry.kind == "prose":
        return [(n, line) for n, line in enumerate(entry.text.splitlines(), 1)]
    if entry.kind == "code":
        base = _python_pieces(entry.text) if entry.language == "python" else _shell_pieces(entry.text)
        if entry.notebook and entry.markdown:
            base += [(0, line) for line in entry.markdown.splitlines()]
        return base
    return []


def words_of(entry) -> tuple[list[str], list[int]]:
    """Normalised words and the line each one starts on."""
    words, lines = [], []
    for first, piece in pieces_of(entry):
        for off, line in enumerate(piece.splitlines() or [""]):
            for w in _WORD.findall(line.lower()):
                words.append(w)
                lines.append(first + off if first else 0)
    return words, lines


def _ranges(lines: list[int]) -> str:
    nums = sorted(set(n for n in lines if n > 0))
    out: list[list[int]] = []
    for n in nums:
        if out and n <= out[-1][1] + 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in out)


def compare(tree_entries, ref_entries: list[tuple[str, object]], *, ngram: int = DEFAULT_NGRAM,
            min_words: int = DEFAULT_MIN_WORDS, list_floor: float = 0.5) -> tuple[pd.DataFrame, dict]:
    """Shared word runs between tree documents and reference documents.

    ref_entries: (reference label, FileEntry). Rows list pairs whose longest
    run reaches `list_floor * min_words` words; "finding" when it reaches
    `min_words`. Returns (frame, stats).
    """
    import pandas as pd
    refs = []
    index: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for r, (label, entry) in enumerate(ref_entries):
        if entry.is_licence:
            continue
        words, lines = words_of(entry)
        refs.append((label, entry, words, lines))
        ri = len(refs) - 1
        for j in range(len(words) - ngram + 1):
            index[hash(tuple(words[j:j + ngram]))].append((ri, j))
    noisy = {h for h, posts in index.items() if len(posts) > MAX_POSTINGS}
    floor = max(ngram, int(list_floor * min_words))
    rows, docs = [], 0
    for entry in tree_entries:
        if entry.is_licence:
            continue
        words, lines = words_of(entry)
        if len(words) < ngram:
            continue
        docs += 1
        diag: dict[tuple[int, int], list[int]] = defaultdict(list)
        for i in range(len(words) - ngram + 1):
            h = hash(tuple(words[i:i + ngram]))
            if h in noisy:
                continue
            for ri, j in index.get(h, ()):
                diag[(ri, j - i)].append(i)
        per_ref: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
        for (ri, d), starts in diag.items():
            run_start = prev = starts[0]
            for i in starts[1:] + [None]:
                if i is not None and i == prev + 1:
                    prev = i
                    continue
                per_ref[ri].append((run_start, prev + ngram, d))  # [start, end) in tree words
                if i is not None:
                    run_start = prev = i
        for ri, runs in per_ref.items():
            longest = max(e - s for s, e, _ in runs)
            if longest < floor:
                continue
            label, rentry, rwords, rlines = refs[ri]
            kept = [(s, e, d) for s, e, d in runs if e - s >= floor]
            covered = set()
            for s, e, _ in kept:
                covered.update(range(s, e))
            rows.append({
                "status": "finding" if longest >= min_words else "below threshold",
                "origin": entry.origin, "tree_file": entry.path, "ref": label, "ref_file": rentry.path,
                "longest_run_words": int(longest), "shared_words": len(covered),
                "tree_lines": _ranges([lines[i] for s, e, _ in kept for i in range(s, e)]),
                "ref_lines": _ranges([rlines[i + d] for s, e, d in kept for i in range(s, e)]),
            })
    frame = pd.DataFrame(rows, columns=COLUMNS)
    if len(frame):
        frame = frame.sort_values(["status", "longest_run_words"], ascending=[False, False],
                                  kind="stable").reset_index(drop=True)
    return frame, {"tree_documents": docs, "ref_documents": len(refs), "noisy_ngrams": len(noisy)}
