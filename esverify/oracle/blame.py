"""Which of the reference's code a failing row involves (docs/parity.md, "Blame").

Design record: two facts, each cheap, intersected. (1) What the clone
changed against the commit docs/references.md was validated against:
`git diff -U0 BASE` of the clone's work tree (committed and uncommitted
changes alike) plus its untracked files, each hunk mapped to the function
that encloses it (ast of the clone's current file). (2) Which of the
clone's functions the row ran: the child records them per command
(oracles/child_coverage.py, a profile hook while the command runs) and
replies with them (`ran`). A changed function the row ran is named; a
changed function it did not run is said to be elsewhere. A clean clone
(or one that is not a git checkout) names instead the reference function
that computes the row's op (the adapter's `computes`, narrowed to what
ran). Nothing here names a reference; git and ast only, never running the
clone's code.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from .. import gitinfo, pyast

#: the hunks a blame names before "and N more"
SHOWN = 3


@dataclass(frozen=True)
class Hunk:
    """Changed lines of one clone file: `first`..`last` of its current text (a deletion: the line
    after which lines were removed), inside `function` ("module level" outside any function);
    `signature`: the lines are all in the function's decorators and signature, before its body."""
    path: str
    first: int
    last: int
    function: str
    signature: bool = False

    def where(self) -> str:
        lines = f"{self.first}" if self.first == self.last else f"{self.first}-{self.last}"
        return f"{self.path}:{lines}"


@dataclass
class Changes:
    """A clone's changes against its base. state: "changed", "clean", "no-git" (not the top of a git
    checkout), "no-commit" (a checkout without commits) or "refused" (git refuses another user's
    repository: `note` names it with git's fix); base: the commit compared with (short);
    note: what a reader must know about the base (an unknown commit, a history without the validated
    one), "" when the clone sits on the validated commit or after it."""
    state: str
    base: str = ""
    head: str = ""
    note: str = ""
    hunks: list = field(default_factory=list)
    #: commits from the validated commit to HEAD (0 at it; None: not counted, e.g. its history lacks it)
    ahead: int | None = None
    validated: str = ""

    def files(self) -> list[str]:
        return list(dict.fromkeys(h.path for h in self.hunks))


#: what a hunk's function is called when its file parses under neither the parent's Python nor the clone's
UNPARSED = "an unknown function (the file does not parse under this Python)"

#: run by the reference's own interpreter: the function map of the file named by argv[1], as JSON (a process
#: of its own, so the parent's parse lock, esverify.pyast, has nothing to guard there)
_FUNCTIONS_SCRIPT = """
import ast, json, sys
from ast import parse
tree = parse(open(sys.argv[1], encoding="utf-8", errors="replace").read())
found = []
def walk(node, prefix):
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = prefix + child.name
            first = min([child.lineno] + [d.lineno for d in child.decorator_list])
            found.append([name, first, child.end_lineno, child.body[0].lineno])
            walk(child, name + ".")
        elif isinstance(child, ast.ClassDef):
            walk(child, prefix + child.name + ".")
        else:
            walk(child, prefix)
walk(tree, "")
print(json.dumps(found))
"""


def functions_in(python: str, path) -> list | None:
    """functions_of for the file `path`, parsed by the interpreter `python` (the reference's own, which
    reads syntax newer than the parent's); None when it cannot (not found, a syntax error there too)."""
    import json
    import subprocess
    try:
        out = subprocess.run([python, "-I", "-c", _FUNCTIONS_SCRIPT, str(path)], capture_output=True, text=True,
                             timeout=60)
        if out.returncode:
            return None
        return [(str(n), int(a), int(b), int(c)) for n, a, b, c in json.loads(out.stdout.strip().splitlines()[-1])]
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError, TypeError):
        return None


def functions_of(source: str, path=None, python: str | None = None) -> list[tuple[str, int, int, int]] | None:
    """(qualified name, first line, last line, first body line) of every function and method in
    `source`, outer ones first (decorators count as the function's lines; the lines before the first
    body line are its decorators and signature). A source the parent's Python cannot parse is parsed by
    `python` (the reference's interpreter) from `path` when both are given; None when neither parses it
    (a reader must then not call its lines "module level")."""
    try:
        tree = pyast.parse(source)
    except (SyntaxError, ValueError):
        return functions_in(python, path) if python and path is not None else None
    found = []

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                found.append((name, first, child.end_lineno, child.body[0].lineno))
                walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)
    walk(tree, "")
    return found


def _innermost(functions, line: int):
    """The entry of `functions` (functions_of) of the innermost function holding `line`, or None."""
    inside = [(f[2] - f[1], k) for k, f in enumerate(functions) if f[1] <= line <= f[2]]
    return functions[min(inside)[1]] if inside else None


def enclosing(functions, line: int) -> str:
    """The innermost function of `functions` (functions_of) holding `line`, or "module level"; UNPARSED when
    `functions` is None (the file did not parse)."""
    if functions is None:
        return UNPARSED
    found = _innermost(functions, line)
    return found[0] if found else "module level"


def in_signature(functions, line: int) -> bool:
    """Whether `line` is in the decorators or signature of the innermost function holding it (before its
    first body line); False at module level."""
    found = _innermost(functions, line) if functions is not None else None
    return found is not None and line < found[3]


_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


def parse_diff(text: str) -> list[tuple[str, int, int]]:
    """(path, first, last) per hunk of a `git diff -U0` text, in the new file's lines; a pure deletion
    is the line after which it removed lines (0: at the top). A deleted file has no new lines: it is
    skipped (nothing of it can run)."""
    out, path = [], None
    for line in text.splitlines():
        if line.startswith("+++ "):
            name = line[4:].strip()
            path = None if name == "/dev/null" else re.sub(r"^b/", "", name)
        elif path is not None:
            match = _HUNK.match(line)
            if match:
                start, count = int(match.group(1)), int(match.group(2) if match.group(2) is not None else 1)
                out.append((path, start, start + count - 1) if count else (path, start, start))
    return out


def clone_changes(root, validated: str, python: str | None = None) -> Changes:
    """The changes of the clone at `root` (its top folder) against `validated` (a commit prefix):
    against that commit when the clone's history holds it (committed and uncommitted changes; `ahead`
    counts the commits since it), else against the clone's own HEAD (its uncommitted changes only, and
    `note` says why). `python`: the reference's interpreter, which parses a file the parent cannot."""
    root = Path(root)
    top = gitinfo.toplevel(root)
    if top is None or top.resolve() != root.resolve():
        return Changes("no-git", note="the clone is not a git checkout: its changes cannot be named")
    head = (gitinfo.git(root, "rev-parse", "HEAD") or "").strip()
    refused = gitinfo.refusal(root) if not head else None
    if refused:   # another user's repository: git answers nothing about it, which is not "no commit"
        return Changes("refused", head=(gitinfo.head_from_files(top) or "")[:7],
                       note=f"{refused[1]}; until then the clone's changes cannot be named")
    if not head:
        return Changes("no-commit", note="the clone's git checkout has no commit: its changes cannot be named")
    base, note, ahead = head, "", None
    full = (gitinfo.git(root, "rev-parse", "--verify", "--quiet", f"{validated}^{{commit}}") or "").strip() \
        if validated else ""
    if full and gitinfo.git(root, "merge-base", "--is-ancestor", full, head) is not None:
        base = full
        ahead = int((gitinfo.git(root, "rev-list", "--count", f"{full}..{head}") or "0").strip() or 0)
        if not head.startswith(validated):
            note = f"the clone is at {head[:7]}, after the validated {validated}: its commits since count"
    elif validated:
        note = (f"the clone is at {head[:7]}, whose history lacks the validated commit {validated}: only its "
                "uncommitted changes are named")
    # the prefixes, text conversion and relative paths pinned: what parse_diff reads is git's own text
    diff = gitinfo.git(root, "diff", "-U0", "--no-color", "--no-ext-diff", "--no-renames", "--no-textconv",
                       "--no-relative", "--src-prefix=a/", "--dst-prefix=b/", base, "--") or ""
    spans = parse_diff(diff)
    untracked = (gitinfo.git(root, "ls-files", "--others", "--exclude-standard") or "").split("\n")
    for rel in filter(None, untracked):
        if rel.endswith(".py") and "__pycache__" not in rel:
            count = len((root / rel).read_text(errors="replace").splitlines())
            spans.append((rel, 1, max(1, count)))
    hunks, parsed = [], {}
    for rel, first, last in spans:
        if rel not in parsed:
            path = root / rel
            parsed[rel] = functions_of(path.read_text(errors="replace"), path, python) \
                if rel.endswith(".py") and path.is_file() else []
        functions = parsed[rel]
        names = list(dict.fromkeys(enclosing(functions, ln) for ln in range(first, last + 1)))
        # a hunk spanning several functions is one hunk per function (each may or may not have run)
        for name in names:
            lines = [ln for ln in range(first, last + 1) if enclosing(functions, ln) == name]
            hunks.append(Hunk(rel, lines[0], lines[-1], name,
                              signature=all(in_signature(functions, ln) for ln in lines)))
    return Changes("changed" if hunks else "clean", base=base[:7], head=head[:7], note=note, hunks=hunks,
                   ahead=ahead, validated=validated if ahead is not None else "")


def _ran_in(ran: dict, hunk: Hunk) -> bool:
    """Whether the row ran `hunk`: its function ran, or (module level, or a function's decorators and
    signature: evaluated when its module is imported, and read by whoever inspects the function, e.g.
    for a default argument, without a call) any function of its file ran."""
    names = set(ran.get(hunk.path) or ())
    return bool(names) if hunk.function in ("module level", UNPARSED) or hunk.signature \
        else hunk.function in names


def _list(hunks) -> str:
    said = [f"{h.where()}, in {h.function}" + (" (its signature)" if h.signature else "") for h in hunks[:SHOWN]]
    return "; ".join(said) + (f" and {len(hunks) - SHOWN} more hunks" if len(hunks) > SHOWN else "")


def explain(changes: Changes, ran: dict | None, computes: list[str]) -> str:
    """One line naming the reference's code a failing row involves.

    changes: clone_changes of its clone; ran: {clone file: [functions the row ran]} or None (unknown:
    the child replied nothing, e.g. it died); computes: ["file::function"] that compute the row's op
    (the adapter's `computes`), for a clone with no changes to name."""
    note = f" ({changes.note})" if changes.note else ""
    if changes.state == "changed":
        if ran is None:
            return (f"the clone differs from {changes.base}{note} in {_list(changes.hunks)}; which of it this row "
                    "ran is unknown (the child reported no functions for it)")
        hit = [h for h in changes.hunks if _ran_in(ran, h)]
        miss = [h for h in changes.hunks if not _ran_in(ran, h)]
        if hit:
            return (f"the clone differs from {changes.base}{note} in {_list(hit)}, which this row ran; "
                    + ("no other changed line ran" if not miss else
                       f"other changed lines did not run: {_list(miss)}"))
        text = (f"the clone differs from {changes.base}{note} in {_list(miss)}, none of which this row ran; "
                "the difference comes from code that is not changed")
    else:
        text = {"clean": f"the clone is clean at {changes.head}{note}"}.get(changes.state, changes.note or
                                                                           "the clone's changes are unknown")
    return text + "; " + computing(ran, computes)


def computing(ran: dict | None, computes: list[str]) -> str:
    """The reference function(s) that compute the row's op, narrowed to those the row ran."""
    pairs = [c.split("::", 1) for c in computes if "::" in c]
    if ran is not None:   # "*::name": that function in whichever clone file has it
        did = [(g, n) for f, n in pairs for g in ([f] if f != "*" else list(ran)) if n in set(ran.get(g) or ())]
        if did:
            return "the first differing quantity is computed by " + ", ".join(f"{n} ({f})" for f, n in did)
        if not pairs:   # nothing declared: every clone function the row ran
            every = [(f, n) for f, names in ran.items() for n in names]
            if every:
                return ("the row ran " + ", ".join(f"{n} ({f})" for f, n in every[:6])
                        + (f" and {len(every) - 6} more" if len(every) > 6 else ""))
    if pairs:
        return "the first differing quantity is computed by " + ", ".join(n if f == "*" else f"{n} ({f})"
                                                                          for f, n in pairs)
    return "no reference function is known to compute it"


def distance_line(target: str, changes: Changes, ran: dict | None) -> str:
    """The first screen's sentence on how far the clone has moved from the commit docs/references.md was
    validated against, and whether the rows ran any of it: "NAME: the clone is 13 commits past the
    validated abc1234; no function the rows ran has changed (module-level lines or signatures changed in
    main.py)". `ran`: {clone file: [functions]} the rows ran, all rows together (None:
    unknown). "" for a clone at the validated commit with no changes, or one whose distance is unknown
    and unchanged."""
    if changes.state in ("no-git", "no-commit"):
        return ""
    if changes.ahead is not None:
        where = (f"the clone is {changes.ahead} commit{'s' if changes.ahead != 1 else ''} past the validated "
                 f"{changes.validated}" if changes.ahead else f"the clone is at the validated {changes.validated}")
    elif changes.note:
        where = changes.note
    else:
        where = f"the clone is at {changes.head}"
    if changes.state != "changed":
        return f"{target}: {where}" if changes.ahead or changes.note else ""
    functions = [h for h in changes.hunks if h.function not in ("module level", UNPARSED) and not h.signature]
    other = [h for h in changes.hunks if h not in functions]
    if ran is None:
        said = f"which of its {len(changes.hunks)} changed hunks the rows ran is unknown"
    else:
        hit = list(dict.fromkeys(f"{h.function} ({h.path})" for h in functions if _ran_in(ran, h)))
        said = ("no function the rows ran has changed" if not hit else
                f"functions the rows ran that changed: {', '.join(hit[:SHOWN])}"
                + (f" and {len(hit) - SHOWN} more" if len(hit) > SHOWN else ""))
        touched = list(dict.fromkeys(h.path for h in other if _ran_in(ran, h)))
        if touched:
            said += f" (module-level lines or signatures changed in {', '.join(touched[:SHOWN])}"  \
                    + (f" and {len(touched) - SHOWN} more files" if len(touched) > SHOWN else "") + ")"
    return f"{target}: {where}; {said}"
