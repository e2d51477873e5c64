"""Every model request a proposer makes, stored by the hash of its content in the run.

Why: a sampling proposer draws new candidates each time it is asked, so a resumed run, a
re-made run or a notebook re-run would search other harnesses than the first time. Keyed by
everything that decides the reply (model, messages, sampling settings, seed), a stored reply
is replayed instead of recomputed: the same candidates, at no cost, without a server.

    cache = ResponseCache(archive.root / "proposer_cache")
    reply = cache.get(request) or cache.put(request, call_model(request))
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any


def request_key(request: dict[str, Any]) -> str:
    """The sha256 of a request's canonical JSON."""
    return hashlib.sha256(json.dumps(request, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class ResponseCache:
    """request -> stored reply (a JSON object), one file per request under `folder`."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    def path(self, request: dict[str, Any]) -> Path:
        return self.folder / f"{request_key(request)[:32]}.json"

    def get(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """The stored reply to `request`, or None. A stored file for another request under
        the same name (a hash prefix collision) is not a hit."""
        path = self.path(request)
        if not path.exists():
            return None
        stored = json.loads(path.read_text(encoding="utf-8"))
        return stored["reply"] if stored.get("request") == json.loads(json.dumps(request)) else None

    def put(self, request: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
        """Store `reply` for `request` (atomically: a kill leaves the old file or the new) and return it."""
        path = self.path(request)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"request": request, "reply": reply}, ensure_ascii=False, indent=1), encoding="utf-8")
        tmp.replace(path)
        return reply
