"""Posts to mpiop's status endpoint as a job's pods make them, or as a hostile pod would: a token, a body, any
headers; and the operator's memory, as the kernel counts it."""

from __future__ import annotations

import json
import ssl
from collections.abc import Mapping
from pathlib import Path

import aiohttp

from mpiop.api.raw import JSON
from mpiop.desired import status_report


def status_url(base: str, namespace: str, name: str) -> str:
    """The URL a job's pods post to (MPIOP_STATUS_URL), on the endpoint at `base` (https://host:port)."""
    return base.rstrip("/") + status_report.path(namespace, name)


def client_context(ca_pem: str) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=ca_pem)


async def post(session: aiohttp.ClientSession, url: str, token: str | None, body: bytes,
               context: ssl.SSLContext | None = None,
               headers: Mapping[str, str] | None = None) -> tuple[int, JSON, Mapping[str, str]]:
    """(status, the answer's JSON, its headers) of one post, on `session`'s connections."""
    sent = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {}),
            **(headers or {})}
    async with session.post(url, data=body, headers=sent, ssl=context if context is not None else False) as answer:
        try:
            decoded = json.loads(await answer.read() or b"{}")
        except ValueError:  # aiohttp's own refusals (a 400 for headers over the limits) are text
            decoded = {}
        return answer.status, decoded if isinstance(decoded, dict) else {}, answer.headers


def rss_bytes(pid: int) -> int:
    """The resident memory of process `pid` (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise ValueError(f"no VmRSS for pid {pid}")
