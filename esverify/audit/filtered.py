"""copydetect's filtered token text with each character's source position (a leaf: the similarity
classifier in `interface` and the base-code corpus in `corpus` both read it, so neither imports the other
for it)."""
from __future__ import annotations


def filtered_positions(text: str, language: str) -> tuple[str, list[tuple[int, int]]]:
    """copydetect's filtered text of `text` (copydetect.utils.filter_code, v0.5) and, per filtered
    character, the (line, column) of the source token it stands for.

    pygments strips leading and trailing newlines and turns \\r\\n and \\r into \\n before lexing; the
    line count of the stripped prefix is added back so positions are those of `text`."""
    from pygments import lexers, token
    lexer = lexers.get_lexer_by_name(language)
    normal = text.replace("\r\n", "\n").replace("\r", "\n")
    line = 1 + (len(normal) - len(normal.lstrip("\n")))
    col = 0
    out, where = [], []
    variable = {token.Name, token.Name.Variable, token.Name.Attribute}
    for kind, value in lexer.get_tokens(text):
        if kind in variable:
            chars = "V"
        elif kind in token.Name.Function:
            chars = "F"
        elif kind in token.Name.Class:
            chars = "O"
        elif kind == token.Comment.Preproc or kind == token.Comment.Hashbang:
            chars = "P"
        elif kind in token.Text or kind in token.Comment:
            chars = ""
        elif kind in token.Literal.String:
            chars = '"' if value in ("'", '"') else "S"
        else:
            chars = value
        for i, c in enumerate(chars):
            out.append(c)
            where.append((line, col + (i if len(chars) == len(value) else 0)))
        newlines = value.count("\n")
        if newlines:
            line += newlines
            col = len(value) - value.rindex("\n") - 1
        else:
            col += len(value)
    return "".join(out), where
