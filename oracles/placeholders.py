"""Drift tolerance of the modules the parity child replaces (docs/parity.md, "What a later commit does to a verdict").

Runs ONLY in the parity child; the esverify package never imports it.

A clone at a later commit than the one a driver was written for often
imports one more name from a module the driver replaces (a new task class
from `tasks`), or one more third-party package at its top (an optional
feature behind a flag whose default leaves it off). Neither is needed by
the rows, so neither may cost them:

- `PermissiveModule`: a stand-in module whose unknown names resolve to a
  placeholder (`placeholder`) instead of raising at import;
- `AbsentFinder`: last on `sys.meta_path`, it serves a placeholder module
  for a top-level `import` of a module no other finder has, when the
  statement is a module-level one of a file of a watched clone (`watch`)
  and no `try` around it catches ImportError (a guarded import keeps its
  own fallback: the reference decides, not us).

A placeholder is inert until it is used: calling it, instantiating it or
a subclass of it, iterating it or using it as a context manager raises
`PlaceholderUsed`, one line naming the module, the name, the clone file
that asked for it and why it is a placeholder. Attribute access and
subscripts give further placeholders (annotations and `a.b.C` chains at a
module's top stay inert). Every placeholder served is recorded (`served`)
and the child passes the list to the parent, which lists each as a note.

The names the driver must control (the seams of docs/references.md) are
not placeholders: they are checked by oracles/interface_drift.py and
used by the drivers directly, so a seam that disappeared is still an
interface finding.
"""
from __future__ import annotations

import ast
import importlib.abc
import importlib.machinery
import os
import sys
import types

#: every placeholder handed out: {"module", "name", "file", "why"} (in order, each once)
_SERVED: list = []
_SEEN: set = set()
#: clone roots whose files' absent top-level imports become placeholders
ROOTS: list = []
_GUARDS: dict = {}   # file -> [(first, last)] line spans of `try` bodies that catch ImportError


class PlaceholderUsed(RuntimeError):
    """A placeholder (a name the child's stand-ins or Python do not have) was used by the reference."""


def served() -> list:
    """The placeholders handed out so far, as plain dicts (JSON-ready), in order."""
    return [dict(p) for p in _SERVED]


def _record(module: str, name: str, file: str, why: str):
    key = (module, name, file)
    if key not in _SEEN:
        _SEEN.add(key)
        _SERVED.append({"module": module, "name": name, "file": file, "why": why})


def _relative(path: str) -> str:
    path = os.path.realpath(path) if os.path.isabs(path) else path
    for root in ROOTS:
        if path.startswith(root + os.sep):
            return path[len(root) + 1:]
    return path


def asking_file(depth: int = 2) -> str:
    """The file of the first frame above `depth` that is not the import system's or this module's: the
    reference file that asked for a name (relative to its clone when it is a clone's file)."""
    frame = sys._getframe(depth)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith("<frozen") and name != __file__:
            return _relative(name)
        frame = frame.f_back
    return "?"


class _PlaceholderMeta(type):
    """The type of every placeholder: a class, so that it may stand as a base class or in an annotation,
    which raises PlaceholderUsed when it (or a subclass) is called or iterated."""

    def __call__(cls, *args, **kwargs):
        raise PlaceholderUsed(cls._esverify_message)

    def __getattr__(cls, name):
        if name.startswith("__") or name.startswith("_esverify"):
            raise AttributeError(name)
        return placeholder(cls._esverify_module, f"{cls._esverify_name}.{name}", cls._esverify_file,
                           cls._esverify_why, record=False)

    def __getitem__(cls, item):
        return cls

    def __or__(cls, other):
        return cls

    __ror__ = __or__

    def __iter__(cls):
        raise PlaceholderUsed(cls._esverify_message)

    def __enter__(cls):
        raise PlaceholderUsed(cls._esverify_message)

    def __exit__(cls, *exc):
        return False

    def __repr__(cls):
        return f"<esverify placeholder {cls._esverify_module}.{cls._esverify_name}>"


def placeholder(module: str, name: str, file: str, why: str, record: bool = True) -> type:
    """An inert placeholder for `module`.`name`, asked for by `file`; `why` says why it is one (it ends the
    message of PlaceholderUsed). Recorded in `served` unless `record` is False."""
    message = (f"{module}.{name} is an esverify placeholder ({why}), asked for by {file}: the reference used it, "
               "so this row needs it; install the package for the child or report the drift")
    if record:
        _record(module, name, file, why)
    return _PlaceholderMeta(name.rsplit(".", 1)[-1], (), {
        "_esverify_module": module, "_esverify_name": name, "_esverify_file": file, "_esverify_why": why,
        "_esverify_message": message, "__module__": module, "__qualname__": name})


class PermissiveModule(types.ModuleType):
    """A module whose unknown public names are placeholders (cached once made); `why` (class attribute
    default, or set per module as `__esverify_why__`) says what the module is."""

    def __getattr__(self, name):
        if name.startswith("__") or sys.modules.get(f"{self.__name__}.{name}", self) is None:
            # a submodule a stand-in declares absent (None in sys.modules) stays absent: `from pkg import
            # sub` must fail as it does without the package
            raise AttributeError(name)
        why = self.__dict__.get("__esverify_why__") or f"esverify's stand-in {self.__name__} has no such name"
        # a name of an absent module's placeholder is not listed again: the module's own entry says it
        value = placeholder(self.__name__, name, asking_file(), why,
                            record=not self.__dict__.get("__esverify_placeholder__"))
        setattr(self, name, value)
        return value


def permissive(module: types.ModuleType, why: str | None = None) -> types.ModuleType:
    """`module` made a PermissiveModule in place (its class swapped; its names kept)."""
    module.__class__ = PermissiveModule
    if why:
        module.__esverify_why__ = why
    return module


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(n, (ast.Name, ast.Attribute)) and (n.id if isinstance(n, ast.Name) else n.attr)
               in ("ImportError", "ModuleNotFoundError", "Exception", "BaseException") for n in names)


def _guards(path: str) -> list:
    """[(first, last)] line spans of the `try` bodies of `path` that catch ImportError (parsed by this
    interpreter, the reference's own; a file that does not parse guards nothing)."""
    if path not in _GUARDS:
        spans = []
        try:
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read())
        except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
            tree = None
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Try) and any(_catches_import_error(h) for h in node.handlers) and node.body:
                spans.append((node.body[0].lineno, node.body[-1].end_lineno))
        _GUARDS[path] = spans
    return _GUARDS[path]


def _importing_frame():
    """The frame of the `import` statement being executed: the first one above the import system's own
    frozen frames; None when the import came through any other code (importlib.import_module,
    importlib.util.find_spec: a probe for whether a package exists must hear the truth)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith("<frozen"):
        frame = frame.f_back
    return frame


class AbsentFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on sys.meta_path: a placeholder module for an absent module imported at the top of a watched
    clone's file, outside any try that catches ImportError."""

    def find_spec(self, fullname, path=None, target=None):
        frame = _importing_frame()
        if frame is None or frame.f_code.co_name != "<module>":
            return None
        file = os.path.realpath(frame.f_code.co_filename)
        if not any(file.startswith(root + os.sep) for root in ROOTS):
            return None
        line = frame.f_lineno
        if any(first <= line <= last for first, last in _guards(file)):
            return None
        spec = importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        spec._esverify_file = _relative(file)
        return spec

    def create_module(self, spec):
        version = ".".join(map(str, sys.version_info[:2]))
        why = f"the child's Python {version} ({sys.executable}) has no module {spec.name}"
        parent = sys.modules.get(spec.name.rpartition(".")[0])
        if getattr(parent, "__esverify_stub__", False):   # a submodule of a package the driver stands in for
            why = f"esverify's stand-in {parent.__name__} has no submodule {spec.name}"
        module = PermissiveModule(spec.name)
        module.__path__ = []
        module.__esverify_placeholder__ = True
        module.__esverify_why__ = why
        if not getattr(parent, "__esverify_placeholder__", False):   # `import a.b.c`: one entry, for a
            _record(spec.name, "*", getattr(spec, "_esverify_file", "?"), why)
        return module

    def exec_module(self, module):
        return None


FINDER = AbsentFinder()


def watch(root) -> None:
    """Serve placeholders for the absent top-level imports of the files under `root` (a clone's top folder;
    several may be watched) from now on."""
    root = os.path.realpath(str(root))
    if root not in ROOTS:
        ROOTS.append(root)
    if FINDER in sys.meta_path:
        sys.meta_path.remove(FINDER)
    sys.meta_path.append(FINDER)   # last: every real finder and every stand-in finder is asked first


def unwatch(root) -> None:
    """Stop watching `root` and drop the placeholder modules served so far (a clone switched away from)."""
    root = os.path.realpath(str(root))
    if root in ROOTS:
        ROOTS.remove(root)
    for name, module in list(sys.modules.items()):
        if getattr(module, "__esverify_placeholder__", False):
            del sys.modules[name]


__all__ = ["PlaceholderUsed", "PermissiveModule", "permissive", "placeholder", "served", "watch", "unwatch",
           "AbsentFinder", "asking_file"]
