"""mpiop.printable: the one filter of every tenant-written string mpiop prints. Control characters (C0, DEL, C1),
format characters (bidi overrides, zero-width ones), line and paragraph separators and lone surrogates are shown
escaped; everything else, other scripts and spaces included, is shown as written; escaping twice is escaping once."""

from __future__ import annotations

import io
import json
import logging

import pytest
import structlog

from mpiop import logging as mpiop_logging
from mpiop.printable import first_unprintable, log_line, printable


@pytest.mark.parametrize(("text", "newlines", "shown"), [
    ("pi-worker-1 container main Error exit 1", False, "pi-worker-1 container main Error exit 1"),
    ("boom \x1b]0;pwned\x07...", False, "boom \\x1b]0;pwned\\x07..."),  # OSC: retitles the terminal, BEL ends it
    ("\x1b[2J\x1b[H", False, "\\x1b[2J\\x1b[H"),  # clear the screen, cursor home
    ("\x9b31m", False, "\\x9b31m"),  # C1 CSI: an escape sequence without ESC
    ("\x00\x08\x7f", False, "\\x00\\x08\\x7f"),
    ("admin\u202etxt.exe", False, "admin\\u202etxt.exe"),  # right-to-left override: reorders what is shown
    ("a\u2066b\u2069c\u200bd\ufeff", False, "a\\u2066b\\u2069c\\u200bd\\ufeff"),  # isolates, zero-width, BOM
    ("one\u2028two\u2029three\x85", False, "one\\u2028two\\u2029three\\x85"),  # line and paragraph separators, NEL
    ("lone \ud800 surrogate", False, "lone \\ud800 surrogate"),
    ("line\nFAKE: line\r\tx", False, "line\\nFAKE: line\\r\\tx"),
    ("line\nnext\tcolumn\rover", True, "line\nnext\tcolumn\\rover"),  # newlines kept: a report and its tail
    ("\x1b[31m\n", True, "\\x1b[31m\n"),
    ("no\u00a0break, ideographic\u3000space, ünïcödé, 日本語, 🙂", False,
     "no\u00a0break, ideographic\u3000space, ünïcödé, 日本語, 🙂"),  # not isprintable(), yet printable
    ("", False, ""),
    ("back\\slash \\x1b", False, "back\\slash \\x1b"),
])
def test_printable(text: str, newlines: bool, shown: str) -> None:
    assert printable(text, newlines=newlines) == shown
    assert printable(shown, newlines=newlines) == shown  # escaping twice is escaping once
    assert first_unprintable(shown if newlines is False else shown.replace("\n", "").replace("\t", "")) is None


def test_printable_returns_the_same_text_when_there_is_nothing_to_escape() -> None:
    text = "pi-worker-1 (ranks 2-3, node n1) container main OOMKilled exit 137"
    assert printable(text) is text and printable(text + "\nnext", newlines=True) is not None


@pytest.mark.parametrize(("text", "first"), [("ok", None), ("a\x1b[2J", "\x1b"), ("x\u202ey\x07", "\u202e"),
                                             ("no\u00a0break", None)])
def test_first_unprintable(text: str, first: str | None) -> None:
    assert first_unprintable(text) == first


@pytest.mark.parametrize(("line", "shown"), [
    ("\x1b[31mred\x1b[0m plain", "red plain"),  # colours dropped: they tell nothing
    ("\x1b[?25l\x1b[2K\x1b[1;32mbold", "bold"),  # cursor hiding, line erasing: CSI sequences too
    ("title\x1b]0;pwned\x07", "title\\x1b]0;pwned\\x07"),  # OSC is no CSI: escaped
    ("bell\x07\tcolumn", "bell\\x07\tcolumn"),  # tabs kept in a log's line
])
def test_log_line(line: str, shown: str) -> None:
    assert log_line(line) == shown


@pytest.mark.parametrize("log_format", ["json", "console"])
def test_every_string_value_of_a_log_line_is_escaped(log_format: mpiop_logging.LogFormat,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr("sys.stderr", out)
    mpiop_logging.configure(log_format)
    try:
        structlog.get_logger("t").info("event \x1b[2J", message="boom \x1b]0;pwned\x07\nFAKE line", job="ns/pi",
                                       count=3)
        logging.getLogger("aiohttp.t").warning("from the standard library: %s", "\u202e\x1b[2J")
    finally:
        structlog.reset_defaults()
        logging.getLogger().handlers = []
    written = out.getvalue()
    assert not any(c in written for c in "\x1b\x07\u202e") and written.count("\n") == 2, written
    if log_format == "json":
        first, second = map(json.loads, written.splitlines())
        assert first["message"] == "boom \\x1b]0;pwned\\x07\\nFAKE line" and first["event"] == "event \\x1b[2J"
        assert second["event"] == "from the standard library: \\u202e\\x1b[2J"
    else:  # the console renderer shows a value's repr(): its backslashes doubled
        assert "event \\x1b[2J" in written and "\\\\x1b]0;pwned" in written
        assert "from the standard library: \\u202e\\x1b[2J" in written
