"""`EventLogConversationStore` needs pydantic-ai-slim 2.66+, and says so in one line on an older one."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys


def _version() -> tuple[int, ...]:
    return tuple(int(part) for part in importlib.metadata.version('pydantic-ai-slim').split('.')[:2])


def test_the_store_imports_or_says_which_version_it_needs() -> None:
    code = 'import capability; capability.EventLogConversationStore'
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=False, timeout=120)
    if _version() >= (2, 66):
        assert done.returncode == 0, done.stderr
        return
    installed = importlib.metadata.version('pydantic-ai-slim')
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        f'ImportError: EventLogConversationStore needs pydantic-ai-slim 2.66 or newer (installed: {installed}); '
        "upgrade with: pip install -U 'pydantic-ai-slim>=2.66'"
    )


def test_the_rest_of_capability_works_without_it() -> None:
    code = 'from capability import EventLogPersistence, ConversationSearch; print("ok")'
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == 'ok', done.stderr
