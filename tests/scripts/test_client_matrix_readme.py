"""The README's client table is the matrix's (tests/support/client_matrix): same clients, same
pinned versions, same faces, so the table never promises a client the tests do not run."""

from __future__ import annotations

from tests.support.client_matrix import readme_table
from tests.support.procs import REPO_ROOT


def test_the_readme_table_is_the_matrix() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    assert readme_table() in readme, "regenerate: python -m scripts.record_client_matrix --table"
