"""Refusing credentials written in plain target settings (they are stored and listed as text).

A heuristic that leans wide, since a false positive costs a move to `secret_headers` and a
false negative a leaked secret: a name is folded to lowercase letters and digits, then matched
against fragments (`auth` catches OAuth and X-Auth-Token) and endings (`key`, `token`, …);
a value is refused when it carries an authorisation scheme, a JWT, an AWS access key id, a PEM
block or a well-known provider token prefix.
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
    return name_looks_secret(name) or bool(_SECRET_VALUE.search(value))


def name_looks_secret(name: str) -> bool:
    folded = re.sub(r"[^a-z0-9]", "", name.lower())
    return any(f in folded for f in _NAME_FRAGMENTS) or folded.endswith(_NAME_ENDINGS)
