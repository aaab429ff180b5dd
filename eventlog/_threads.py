"""`to_thread`: bulk work off the event loop, without importing asyncio until it is needed.

The log's coroutines can also be driven by hand, with no event loop (the command line's fast
commands do, to start without asyncio): with no loop running (asyncio not even imported), the
work runs inline, as the log's short reads always do, where `asyncio.to_thread` would fail.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar

__all__ = ['to_thread']

P = ParamSpec('P')
T = TypeVar('T')


async def to_thread(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`asyncio.to_thread(fn, *args, **kwargs)`; inline when no event loop is running."""
    asyncio = sys.modules.get('asyncio')
    if asyncio is None:
        return fn(*args, **kwargs)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn(*args, **kwargs)
    return await asyncio.to_thread(fn, *args, **kwargs)
