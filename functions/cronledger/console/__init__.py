"""The web console: static files shipped in the package, served at `/console` by the API and
by `cronledger console`'s proxy; both send `/` there. No build step, nothing from a CDN, and
a Content-Security-Policy that allows this origin only.
"""

from __future__ import annotations

from importlib import resources
from typing import Final

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

PAGE: Final = "/console"
_TYPES: Final = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".png": "image/png",
}
HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def asset(path: str) -> tuple[bytes, str] | None:
    """The file at `path` (`/console` is the page, `/console/<name>` one of its files) and
    its content type; None for anything else."""
    if path.rstrip("/") == PAGE:
        name = "index.html"
    elif path.startswith(f"{PAGE}/"):
        name = path.removeprefix(f"{PAGE}/")
    else:
        return None
    suffix = name[name.rfind(".") :] if "." in name else ""
    if "/" in name or name.startswith(".") or suffix not in _TYPES:
        return None
    file = resources.files(__name__).joinpath("static", name)
    if not file.is_file():
        return None
    return file.read_bytes(), _TYPES[suffix]


router = APIGatewayHttpRouter()  # type: ignore[no-untyped-call]


@router.get("/", include_in_schema=False)
def root() -> Response[bytes]:
    # Event links name the console as `/#channel=…`: the browser keeps the fragment across
    # this redirect, so the link opens that panel (as the local proxy's does).
    return Response(302, "text/plain; charset=utf-8", b"", headers={"Location": PAGE})


@router.get(PAGE, include_in_schema=False)
@router.get(f"{PAGE}/<name>", include_in_schema=False)
def file(name: str | None = None) -> Response[bytes]:
    found = asset(PAGE if name is None else f"{PAGE}/{name}")
    if found is None:
        return Response(404, "text/plain; charset=utf-8", b"no such file", headers=HEADERS)
    body, content_type = found
    return Response(200, content_type, body, headers=HEADERS)
