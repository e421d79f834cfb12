"""Refusing credentials written in plain target settings (docs/guarantees.md#security).

Target documents are stored, listed and returned in plain text, so a header or query parameter
that looks like a credential is refused when the channel is saved; `secret_headers` is where a
credential goes (by reference, resolved at run time). This is a heuristic, tuned to catch the
ways people actually spell credentials rather than a fixed word list: a name is reduced to its
lowercase letters and digits (`X-Auth_Token`, `xAuthToken` and `X.AUTH.TOKEN` are one name), then
matched against fragments (`auth` catches Authorization, Authorisation, OAuth, X-Auth-Token),
and a name ending in `key`, `token`, `pass` or `sig` is refused whatever precedes it
(`X-Private-Key`, `Refresh-Token`). Values are refused when they carry an authorisation scheme
(`Bearer abc`, `bearer:abc`, `Basic=…`), a JWT, an AWS access key id, a PEM block or a
well-known provider token prefix. A false positive costs one move to `secret_headers`, which
works for any header; a false negative costs a leaked secret, so the heuristic leans wide.
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
