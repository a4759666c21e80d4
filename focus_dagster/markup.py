"""Text from users, made inert in the Markdown and HTML the platform writes.

Model ids, dataset keys, column names and values of users' label files (a camera, a free-text column),
questions and reasons reach the leaderboard file, the arena report and the Markdown previews of the UI. The
Dagster UI sanitises what it renders; a Markdown viewer, an editor's preview or a browser opening a copied
report does not. So every such value is escaped where it is written: in Markdown with `md_text`, in the
report's HTML with the standard library's `html.escape` (focus_dagster/report/page.py). What a value says is
shown as text, never read as markup.
"""

from __future__ import annotations

import re

# Control characters (a newline among them) would end a table row or start a block such as a heading.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
# Markdown characters that could make a value more than text: `\` (an escape of what follows), `|` (a table
# cell's end), `[` `]` (a link or an image, fetched when shown) and a backtick (a code span's end).
_MARKDOWN_SIGNIFICANT = re.compile(r"([\\|\[\]`])")


def md_text(value: object) -> str:
    """`value` as Markdown text, in a table cell or in a line: shown as written, read as nothing else.

    HTML-significant characters become entities (no tag, no autolink: `<img ...>` shows as written), the Markdown
    characters that end a cell, open a link or close a code span get a backslash, and control characters (a
    newline among them) become a space, so that the value stays in its cell and on its line.
    """
    text = _CONTROL.sub(" ", str(value))
    text = _MARKDOWN_SIGNIFICANT.sub(r"\\\1", text)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
