"""kubectl's output conventions (pure): tables with upper-case headers and three spaces between columns, `<none>`
for nothing, and ages as kubectl prints them (k8s.io/apimachinery's duration.HumanDuration)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from mpiop.printable import printable

NONE = "<none>"
_GAP = "   "


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns as wide as their widest cell (escaped: a tenant writes some), no trailing spaces, one
    line per row."""
    cells = [[h.upper() for h in headers], *[[printable(str(c)) if c != "" else NONE for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(_GAP.join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells) + "\n"


def human_duration(seconds: float) -> str:
    """As `kubectl get` prints an AGE: 45s, 3m20s, 15m, 2h5m, 20h, 3d4h, 40d, 2y10d."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def age(when: str | None, now: dt.datetime) -> str:
    """The age of an RFC 3339 time (metav1.Time), or <none>."""
    if not when:
        return NONE
    then = dt.datetime.fromisoformat(when.replace("Z", "+00:00"))
    return human_duration((now - then).total_seconds())
