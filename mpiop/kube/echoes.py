"""The watch event of our own write, when it comes before the write's answer: no news, held and dropped.

The controller feeds each answer to its writes into the cache (`Informer.observe_write`), so when the write's watch
event comes after the answer it changes nothing cached and tells no handler. On a busy process the event is often
read first: it then told the handlers of a change the writing pass had made itself, and queued one more pass of the
job that found nothing to do (bench: 0.2-0.35 passes a job, of ~5). While a write to an object is in flight its
watch events are held; once the answer comes, a single held event at the answer's resourceVersion was that write's
and is dropped. Anything else (two events, another version, a write that failed) is told then, as one change from
the object held before to the object cached now, so no change of anyone else's is lost, only told a little later.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from mpiop.api.raw import JSON
from mpiop.kube import resourceversion


@dataclass
class _Held:
    before: JSON | None  # the cached object before the first event held (None: it was not cached)
    events: int = 0
    version: str = ""  # the resourceVersion of the last event held


class OwnWrites:
    """Per key, the writes in flight, the watch events held meanwhile and the version the last write answered."""

    def __init__(self) -> None:
        self._in_flight: Counter[str] = Counter()
        self._held: dict[str, _Held] = {}
        self._answered: dict[str, str] = {}

    def begin(self, key: str) -> None:
        self._in_flight[key] += 1

    def hold(self, key: str, old: JSON | None, new: JSON) -> bool:
        """Whether this watch event of `key` (from `old` to `new`) waits for a write in flight instead of being told."""
        if not self._in_flight[key]:
            return False
        held = self._held.setdefault(key, _Held(old))
        held.events += 1
        held.version = resourceversion.of(new)
        return True

    def answered(self, key: str, version: str) -> None:
        """Our write to `key` was answered with this resourceVersion."""
        if self._in_flight[key]:
            self._answered[key] = version

    def forget(self, key: str) -> None:
        """A deletion of `key` was told: what was held is older than that."""
        self._held.pop(key, None)

    def end(self, key: str) -> tuple[bool, JSON | None]:
        """A write to `key` is over (answered or not): whether a held change is to be told now, and from what."""
        self._in_flight[key] -= 1
        if self._in_flight[key] > 0:
            return False, None
        del self._in_flight[key]
        answered = self._answered.pop(key, "")
        held = self._held.pop(key, None)
        if held is None or (held.events == 1 and answered and held.version == answered):
            return False, None
        return True, held.before
