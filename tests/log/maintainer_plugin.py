"""Install a maintainer for a projection kind the way a third-party package does: an entry of
`eventlog.projection.MAINTAINER_GROUP` in a distribution's installed metadata (a `.dist-info`
directory on `sys.path`), never anything recorded in a store."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventlog.projection import MAINTAINER_GROUP


def install_maintainer(where: Path, monkeypatch: pytest.MonkeyPatch, kind: str, reference: str) -> Path:
    """Put a distribution whose metadata names `reference` (`module:function`) the maintainer of
    `kind` under `where`, and `where` on `sys.path` for the test; returns `where` (for a child's
    `PYTHONPATH`)."""
    info = where / f'demo_projection_{kind}-1.0.dist-info'
    info.mkdir(parents=True, exist_ok=True)
    (info / 'METADATA').write_text(f'Metadata-Version: 2.1\nName: demo-projection-{kind}\nVersion: 1.0\n')
    (info / 'entry_points.txt').write_text(f'[{MAINTAINER_GROUP}]\n{kind} = {reference}\n')
    monkeypatch.syspath_prepend(str(where))
    return where
