"""RFC 7386 JSON merge patch, applied as the apiserver applies one (`application/merge-patch+json`): the one
home of it, for the layout webhook (which answers with the spec the controller's merge patch would make) and
testkit's recording client (which answers a PATCH with the object it patched)."""

from __future__ import annotations

import copy
from typing import Any


def merged(target: Any, patch: Any) -> Any:
    """`patch` merged into `target`: objects merge key by key, null removes a key, anything else (lists too)
    replaces. Neither is changed: the answer shares only what the patch left alone with `target`."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merged(result.get(key), value)
    return result
