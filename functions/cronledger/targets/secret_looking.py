"""Refusing credentials written in plain target settings (they are stored and listed as text).
The heuristic leans wide: a false positive costs a move to `secret_headers`, a false negative a
leaked secret. A name is folded to lowercase letters and digits and matched against fragments
(`auth` catches OAuth) and endings; a value by its authorisation scheme, JWT, AWS key id, PEM
block or provider token prefix.
"""

from __future__ import annotations

import re

_NAME_FRAGMENTS = (
    "auth", "token", "secret", "passw", "passphrase", "passwd", "pwd", "cookie", "credential",
    "signature", "session", "apikey", "accesskey", "privatekey", "bearer", "jwt", "otp",
)  # fmt: skip
_NAME_ENDINGS = ("key", "token", "pass", "sig", "pin")
_SECRET_VALUE = re.compile(
    r"(?i)^\s*(bearer|basic|digest|negotiate|token|apikey|api-key|hoba|mutual)\s*[\s:=]\s*\S"
    r"|^eyJ[\w-]+\.eyJ[\w-]+\."  # a JWT
    r"|(AKIA|ASIA)[0-9A-Z]{16}"  # an AWS access key id
    r"|-----BEGIN [A-Z ]+-----"  # a PEM block
    r"|AWS4-HMAC-SHA256\s"  # a SigV4 authorization
    r"|\b(ghp|gho|ghu|ghs|ghr|github_pat|glpat|xox[abposr]|sk_live|rk_live|sk-proj)[-_]\w{8,}"
)


def looks_secret(name: str, value: str) -> bool:
    """Whether a header or query parameter `name: value` looks like it carries a credential."""
    folded = re.sub(r"[^a-z0-9]", "", name.lower())
    named = any(f in folded for f in _NAME_FRAGMENTS) or folded.endswith(_NAME_ENDINGS)
    return named or bool(_SECRET_VALUE.search(value))
