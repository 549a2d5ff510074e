"""One fingerprint helper: the bytes of a tensor in logical order, and SHA-256 over chunks."""
import hashlib

import pytest
import torch

from detconf.engine.fingerprint import flat_host_copy, sha256, tensor_bytes


@pytest.mark.parametrize("make", [
    lambda: torch.arange(12.0).reshape(3, 4).t(),                 # transposed
    lambda: torch.arange(10.0)[::5][:1],                           # one element, odd stride
    lambda: torch.tensor([1 + 2j, 3 - 4j]).conj(),                 # conj bit
    lambda: torch.tensor([1 + 2j, 3 - 4j]).conj().imag,            # neg bit
    lambda: torch.tensor([True, False, True]),
    lambda: torch.empty(0, 3),
])
def test_the_bytes_are_the_values_in_logical_order(make):
    t = make()
    fresh = torch.tensor(t.tolist(), dtype=t.dtype).reshape(-1)
    assert tensor_bytes(t) == fresh.view(torch.uint8).numpy().tobytes()
    assert flat_host_copy(t).stride() == (1,) or t.numel() == 0


def test_sha256_is_the_digest_of_the_chunks_one_after_another():
    assert sha256(["ab", b"cd"]) == hashlib.sha256(b"abcd").hexdigest()
    assert sha256([b"x"], length=16) == hashlib.sha256(b"x").hexdigest()[:16]


def test_every_fingerprint_of_the_suite_is_this_helpers():
    """The runner's per-run fingerprint, the device-to-device one, the seed checks' and the cuBLAS
    child's: each is this module's, with its own chunks (their digests are unchanged)."""
    from detconf.conformance import harness, rng_ops

    values = [("out", torch.tensor([1.0, -0.0]))]
    h = hashlib.sha256()
    for chunk in (b"out", b"torch.float32", b"(2,)", values[0][1].numpy().tobytes()):
        h.update(chunk)
    assert harness.values_fingerprint(values) == h.hexdigest()
    t = torch.tensor([1, 2, 3], dtype=torch.int64)
    assert rng_ops.fingerprint((t,)) == hashlib.sha256(b"torch.int64|(3,)|" + t.numpy().tobytes()).hexdigest()[:16]
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    users = [p for p in list((root / "engine").glob("*.py")) + list((root / "conformance").rglob("*.py"))
             if "hashlib.sha256(" in p.read_text(encoding="utf-8")]
    assert [p.relative_to(root).as_posix() for p in users] == ["engine/fingerprint.py"] or \
        {p.relative_to(root).as_posix() for p in users} <= {"engine/fingerprint.py", "conformance/shard.py"}
