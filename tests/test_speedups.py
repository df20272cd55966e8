"""crawlq._speedups, the optional C kernels: BLAKE2b-128 gives hashlib's bytes, and
FingerprintSet answers as a set does."""

from __future__ import annotations

import hashlib
import random
from typing import Any

import pytest

# Imported outright: where the extension failed to build, these tests fail (crawlq
# itself would run, on its pure-Python path).
import crawlq._speedups as speedups


def test_blake2b_matches_hashlib() -> None:
    rng = random.Random(7)
    for n in [0, 1, 15, 16, 127, 128, 129, 255, 256, 257, 1000, 5000]:
        data = bytes(rng.randrange(256) for _ in range(n))
        assert speedups.blake2b_128(data) == hashlib.blake2b(data, digest_size=16).digest()


@pytest.mark.parametrize("seed", range(3))
def test_fingerprint_set_agrees_with_set(seed: int) -> None:
    """FingerprintSet answers `in`, add(), len() and iteration as a set does: over
    several growths, the all-zero fingerprint, fingerprints sharing a half, and keys of
    other lengths and types (kept beside)."""
    rng = random.Random(seed)
    fps, ref = speedups.FingerprintSet(), set()
    keys: list[Any] = [rng.randbytes(16) for _ in range(20_000)]
    keys += [k[:8] + rng.randbytes(8) for k in keys[:500]]  # the same first half
    keys += [rng.randbytes(8) + k[8:] for k in keys[:500]]  # the same second half
    keys += [bytes(16), b"", b"x" * 15, b"y" * 17, b"z" * 32, "text", 7]
    rng.shuffle(keys)
    for k in keys:
        assert (k in fps) == (k in ref)
        if rng.random() < 0.7:
            fps.add(k)
            ref.add(k)
        assert len(fps) == len(ref)
    assert all((k in fps) == (k in ref) for k in keys)
    assert not any(rng.randbytes(16) in fps for _ in range(5_000))
    assert sorted(map(repr, fps)) == sorted(map(repr, ref))
    for k in keys[:100]:  # all again: only those not in yet are new
        fps.add(k)
        ref.add(k)
    assert len(fps) == len(ref) and sorted(map(repr, fps)) == sorted(map(repr, ref))
    with pytest.raises(TypeError):
        [] in fps  # noqa: B015 - unhashable, as for a set
    with pytest.raises(TypeError):
        fps.add([])  # type: ignore[arg-type]


def test_fingerprint_set_is_small() -> None:
    """The memory store's seen-set costs well under what a set of bytes objects does
    (17 bytes a slot, 35% to 70% of the slots used)."""
    import tracemalloc

    rng = random.Random(5)
    keys = [rng.randbytes(16) for _ in range(100_000)]
    sizes = []
    tracemalloc.start()
    try:
        for make in (speedups.FingerprintSet, set):
            before = tracemalloc.get_traced_memory()[0]
            held: Any = make()
            for k in keys:
                held.add(bytes(bytearray(k)))  # a fresh bytes object, as add() gets
            sizes.append(tracemalloc.get_traced_memory()[0] - before)
            assert len(held) == 100_000
            del held
    finally:
        tracemalloc.stop()
    assert sizes[0] / 100_000 < 50 and sizes[0] < 0.6 * sizes[1], sizes
