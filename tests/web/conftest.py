"""Fixtures of the web viewer's tests: one store for the session, servers over it, a browser page."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page
from webtools import CHROMIUM, CHROMIUM_ARGS, TOKEN, Server, WebStore, build_web_store, serving


@pytest.fixture(scope='session')
def web_store(tmp_path_factory: pytest.TempPathFactory) -> WebStore:
    return asyncio.run(build_web_store(tmp_path_factory.mktemp('web') / 'eventlog-demo.lmdb'))


@pytest.fixture(scope='session')
def server(web_store: WebStore) -> Iterator[Server]:
    with serving(web_store.path) as running:
        yield running


@pytest.fixture(scope='session')
def token_server(web_store: WebStore) -> Iterator[Server]:
    with serving(web_store.path, '--token', TOKEN) as running:
        yield running


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Page]:
    """A page of a fresh headless Chromium (Debian's, with a fresh profile); fails when it is missing."""
    assert CHROMIUM.exists(), f'{CHROMIUM} is missing: `make browser` installs it (apt-get install chromium)'
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / 'profile'),
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={'width': 1280, 'height': 900},
        )
        try:
            yield context.new_page()
        finally:
            context.close()
