"""A pytest plugin that runs w3lib's own canonicalize_url tests on crawlq's canonicalizer.

tests/test_url_conformance.py runs, from the unpacked w3lib sdist::

    pytest -p w3lib_canonical_plugin tests/test_url.py -k CanonicalizeUrl

Every test module's ``canonicalize_url`` is replaced, before each test, by crawlq's
:class:`~crawlq.Canonicalizer` with w3lib's keywords mapped onto its steps.
"""

from __future__ import annotations

from typing import Any

import pytest

from crawlq import Canonicalizer

_KEEP_FRAGMENTS = Canonicalizer(drop_fragment=False)
_DEFAULT = Canonicalizer()


def canonicalize_url(url: str | bytes, keep_blank_values: bool = True,
                     keep_fragments: bool = False, encoding: str | None = None) -> str:
    """w3lib's signature on crawlq's canonicalizer. crawlq has no counterpart of
    ``keep_blank_values=False`` (it keeps ``a=``) or of ``encoding`` (URLs are UTF-8, as
    the WHATWG standard has them): those are ignored, and the tests using them show it."""
    if isinstance(url, bytes):
        url = url.decode("utf-8")
    return (_KEEP_FRAGMENTS if keep_fragments else _DEFAULT)(url)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: Any) -> None:
    """Swap the module's canonicalize_url for crawlq's before each test."""
    module = getattr(item, "module", None)
    if module is not None and hasattr(module, "canonicalize_url"):
        module.canonicalize_url = canonicalize_url
