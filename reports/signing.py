"""Who certified a package: an OpenSSH signature over its ``SHA256SUMS`` (docs/certification.md,
"Signed packages").

``certify --sign KEY`` runs ``ssh-keygen -Y sign`` with the submitter's private key over
``SHA256SUMS`` (which names the SHA-256 of every other file) and keeps the signature beside it as
``SHA256SUMS.sig``. ``verify --allowed-signers FILE`` finds the principal that ``FILE`` (OpenSSH's
``allowed_signers`` format: ``principal key-type key``) names for the signing key and checks the
signature with ``ssh-keygen -Y verify``; the namespace ``detconf-certification`` keeps a signature
made for anything else from counting here. No Python dependency: ``ssh-keygen`` is OpenSSH's.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

#: The signature file, beside ``SHA256SUMS`` in the package.
SIGNATURE = "SHA256SUMS.sig"
#: OpenSSH's signature namespace for certification packages.
NAMESPACE = "detconf-certification"
_TIMEOUT = 60


class SigningError(Exception):
    """Signing or checking could not be done (no ssh-keygen, an unreadable key): one line."""


def _ssh_keygen() -> str:
    found = shutil.which("ssh-keygen")
    if found is None:
        raise SigningError("ssh-keygen (OpenSSH) is not installed: it signs and checks packages")
    return found


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


def _readable_file(path: Path, what: str) -> None:
    import stat

    try:
        info = os.stat(path)
    except OSError as exc:
        raise SigningError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    if not stat.S_ISREG(info.st_mode):
        raise SigningError(f"{path}: the {what} is not a regular file")


def sign(sums: Path, key: Path) -> Path:
    """Sign ``sums`` with the private key ``key``; returns the signature file (``SIGNATURE``
    beside ``sums``). A key with a passphrase is refused (nothing is asked on a terminal)."""
    _readable_file(key, "signing key")
    out = subprocess.run([_ssh_keygen(), "-Y", "sign", "-f", str(key), "-n", NAMESPACE, "-P", "", str(sums)],
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=_TIMEOUT)
    made = sums.with_name(sums.name + ".sig")
    if out.returncode != 0 or not made.is_file():
        raise SigningError(f"{key}: ssh-keygen could not sign with it: {_last_line(out.stderr)}")
    if made.name != SIGNATURE:
        made.rename(sums.with_name(SIGNATURE))
    return sums.with_name(SIGNATURE)


def signer(sums: Path, signature: Path, allowed_signers: Path) -> tuple[str | None, str]:
    """``(principal, words)``: the principal of ``allowed_signers`` whose key made ``signature``
    over ``sums`` (None when none did, with why), and a description of the key."""
    _readable_file(allowed_signers, "allowed signers file")
    keygen = _ssh_keygen()
    found = subprocess.run([keygen, "-Y", "find-principals", "-s", str(signature), "-f", str(allowed_signers)],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=_TIMEOUT)
    principals = [p.strip() for p in found.stdout.splitlines() if p.strip()]
    if found.returncode != 0 or not principals:
        return None, f"the key that signed it is not in {allowed_signers} ({_last_line(found.stderr)})"
    for principal in principals:
        with open(sums, "rb") as data:
            checked = subprocess.run([keygen, "-Y", "verify", "-f", str(allowed_signers), "-I", principal,
                                      "-n", NAMESPACE, "-s", str(signature)], stdin=data, capture_output=True,
                                     text=True, timeout=_TIMEOUT)
        if checked.returncode == 0:
            return principal, _last_line(checked.stdout + "\n" + checked.stderr)
    return None, f"the signature does not match {sums.name} ({_last_line(checked.stderr)})"
