"""What the package root injects into the client side, left here before any of it is imported.

``hivemind_memory/__init__`` (the root, above the client and the worker) sets
``embedded_worker`` when it is imported, which is before any ``hivemind_memory.*`` module is:
so the root need not import the SDK itself (a client-only process, ``hivemind batch`` say,
never loads it), and ``api_stub.sdk`` still starts with the root's factory, however it is
imported. Nothing here imports anything of hivemind.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

embedded_worker: Callable[[Any, Any], Any] | None = None
"""``(settings, store) -> a started embedded worker`` (``sdk.EmbeddedWorkerFactory``): how a
``memory://`` Memory starts its in-process worker; None until the package root sets it."""
