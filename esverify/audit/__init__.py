"""`esverify audit`: evidence for the clean-room claim.

Design record. The audit reads one or more *sources* (a checkout's tracked
files, a built wheel or sdist, every blob in the git history) into
in-memory `FileEntry` records (`sources`), then runs five independent
sections over them and writes one pandas report (`esverify.report`):

1. `similarity`: copydetect winnowing fingerprints of every code file
   against every reference code file (exact inverted-index prefilter);
2. `text`: shared runs of normalised words in comments, docstrings and
   prose (the token pass does not see them);
3. `identity`: byte-identical files (SHA-256), trivial files listed only;
4. `imports`: an ast scan of the `esverify` package for reference imports,
   loads by path and in-process use of the oracle area, plus the places
   in the oracle area that load reference code (child process only);
5. `provenance`: commits, dirty flags, licences (the Academic Public
   License of docs/references.md §4 is recognised and kept apart from the
   Academic Free License), a SHA-256 manifest, tools and parameters.

Sections 1-3 need `--ref`; without it they are skipped and say so.
Nothing here imports torch, numba or the oracle area.
"""
