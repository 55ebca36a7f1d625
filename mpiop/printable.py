"""The one filter for every tenant-written string mpiop prints: a condition's or Event's message, a log line's
values, the kubectl plugin's output.

A job's pods write their termination messages, logs and trainerStatus; whoever reads them (`kubectl describe`,
`kubectl mpijob status`, the operator's log on a console) is someone else, and a terminal obeys what it is handed:
ESC starts an escape sequence (retitle the window, move the cursor, rewrite what was shown), BEL rings, C1 controls
do the same without ESC, bidirectional overrides (U+202E) reorder what is shown, line separators start lines that
are not there. So each such character is shown escaped, as Python writes it (`\\x1b`, `\\u202e`), and what a reader
sees is what was written. The lowest module of mpiop (it imports nothing): every layer may use it.
"""

from __future__ import annotations

import functools
import re
import unicodedata

# Control characters (C0, DEL, C1), format characters (bidi overrides and isolates, zero-width joiners), line and
# paragraph separators, lone surrogates.
UNPRINTABLE = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
_LINE_BREAKS = {ord("\n"): None, ord("\t"): None}
# A CSI sequence (colours, cursor moves): what a program paints its output with. Dropped from a log's lines rather
# than shown escaped: a coloured log reads as it was meant to; the sequence tells nothing.
_CSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def is_unprintable(char: str) -> bool:
    return unicodedata.category(char) in UNPRINTABLE


def first_unprintable(text: str) -> str | None:
    """The first character of `text` that `printable` would escape, or None."""
    if text.isprintable():
        return None
    return next((c for c in text if is_unprintable(c)), None)


def printable(text: str, *, newlines: bool = False) -> str:
    """`text` with every control and format character escaped (`\\x1b`, `\\u202e`); with `newlines`, line feeds
    and tabs are kept (a multi-line message: a condition's report and its log tail). The same text when there is
    nothing to escape, so it costs one `str.isprintable()` on what is printable already, and escaping twice
    changes nothing more than once."""
    if text.isprintable() or (newlines and text.translate(_LINE_BREAKS).isprintable()):
        return text
    kept = "\n\t" if newlines else ""
    return "".join(c if c.isprintable() or c in kept else _shown(c) for c in text)


@functools.lru_cache(maxsize=1024)
def _shown(char: str) -> str:
    """A character `str.isprintable()` refused, as shown: escaped if unprintable, else itself (a no-break space)."""
    return char.encode("unicode_escape").decode() if is_unprintable(char) else char


def log_line(line: str) -> str:
    """One line of a container's log as mpiop shows it: colour and cursor sequences dropped, then `printable`
    (tabs kept)."""
    return printable(_CSI.sub("", line) if "\x1b" in line else line, newlines=True)
