"""How a Lambda container reaches the ledger: over verified TLS, as an IAM user, through RDS
Proxy (`standard`, `ha`) or straight to the Aurora cluster (`lean`); `CRONLEDGER_DATABASE_URL`,
when set, wins.

The stack names the database (`CRONLEDGER_DB_*`) and never gives a password: each connection
presents a token signed locally with the function's role (SigV4 presigned `connect` for
`rds-db`, without loading the RDS service model), inside a TLS context that verifies the proxy's
chain against the runtime's trust store, the cluster's against `rds-ca-bundle.pem`. Behind a
proxy nothing is prepared and no startup parameter is sent (either would pin the session), so
the statement timeout is the database's default, which `migrate` sets. Without a proxy,
`migrate` connects as the master user from a secret named to it alone (`admin_engine`).
"""

from __future__ import annotations

import functools
import json
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from cronledger.errors import CronledgerError
from cronledger.ledger import create_ledger_engine
from cronledger.settings import Settings

DATABASE_URL = "CRONLEDGER_DATABASE_URL"
DB_HOST = "CRONLEDGER_DB_HOST"
DB_PORT = "CRONLEDGER_DB_PORT"
DB_NAME = "CRONLEDGER_DB_NAME"
DB_USER = "CRONLEDGER_DB_USER"
DB_IAM_AUTH = "CRONLEDGER_DB_IAM_AUTH"
DB_PROXY = "CRONLEDGER_DB_PROXY"
DB_ADMIN_SECRET_ARN = "CRONLEDGER_DB_ADMIN_SECRET_ARN"
DEFAULT_PORT = 5432
#: Where Lambda tells a function its region (botocore reads the same variables).
REGION_VARIABLES = ("AWS_REGION", "AWS_DEFAULT_REGION")
#: How long a token may start a connection: RDS accepts at most 15 minutes.
TOKEN_SECS = 900
#: The Amazon RDS root certificates a direct connection to the cluster is verified against.
RDS_CA_BUNDLE = Path(__file__).with_name("rds-ca-bundle.pem")
#: One invocation at a time per container: the calling thread, plus an executor's heartbeat
#: beside a target that may use the database itself.
PROXY_POOL: dict[str, Any] = {"pool_size": 1, "max_overflow": 2}


class DatabaseConfigError(CronledgerError):
    """The environment does not say how to reach the database; the message names what to set."""


@dataclass(frozen=True, slots=True)
class DatabaseEndpoint:
    host: str
    port: int
    database: str
    user: str
    via_proxy: bool = True

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> DatabaseEndpoint:
        missing = [name for name in (DB_HOST, DB_NAME, DB_USER) if not environ.get(name)]
        if missing:
            raise DatabaseConfigError(
                f"set {', '.join(missing)} (the stack does), or {DATABASE_URL} for a database "
                "outside it"
            )
        if environ.get(DB_IAM_AUTH, "").strip().lower() != "true":
            raise DatabaseConfigError(
                f"{DB_IAM_AUTH} must be true: the functions authenticate to the database with "
                "IAM tokens and never hold a password"
            )
        proxy = environ.get(DB_PROXY, "true").strip().lower()
        if proxy not in ("true", "false"):
            raise DatabaseConfigError(f"{DB_PROXY}={proxy!r} must be true or false")
        raw_port = environ.get(DB_PORT, str(DEFAULT_PORT))
        try:
            port = int(raw_port)
        except ValueError:
            raise DatabaseConfigError(f"{DB_PORT}={raw_port!r} is not a port number") from None
        return cls(environ[DB_HOST], port, environ[DB_NAME], environ[DB_USER], proxy == "true")

    def tls(self) -> ssl.SSLContext:
        """A context that verifies the server's certificate and host name (module header)."""
        return ssl.create_default_context(cafile=None if self.via_proxy else str(RDS_CA_BUNDLE))

    def url(self) -> sa.URL:
        """The URL without a password: the token is added per connection."""
        return sa.URL.create(
            "postgresql+pg8000",
            username=self.user,
            host=self.host,
            port=self.port,
            database=self.database,
        )

    def iam_token(self, region: str) -> str:
        """A token signed for this endpoint and user, the password each new connection
        presents."""
        from botocore.auth import SigV4QueryAuth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import EnvProvider

        credentials = EnvProvider().load()
        if credentials is None:
            raise DatabaseConfigError(
                "no AWS credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (Lambda sets "
                "them to the function's role) to sign the database's IAM token with"
            )
        request = AWSRequest(
            method="GET",
            url=f"https://{self.host}:{self.port}/",
            data={"Action": "connect", "DBUser": self.user},
        )
        SigV4QueryAuth(credentials, "rds-db", region, expires=TOKEN_SECS).add_auth(request)
        return str(request.url).removeprefix("https://")


def ledger_engine(environ: Mapping[str, str] = os.environ) -> sa.Engine:
    """The engine for this container's ledger, from the environment (see the module header)."""
    url = environ.get(DATABASE_URL, "").strip()
    if url:
        return _engine(url, environ)
    endpoint = DatabaseEndpoint.from_env(environ)
    return _engine(
        endpoint.url(),
        environ,
        via_proxy=endpoint.via_proxy,
        password=functools.partial(endpoint.iam_token, function_region()),
        connect_args={"ssl_context": endpoint.tls()},
        **PROXY_POOL,
    )


def _engine(
    url: str | sa.URL, environ: Mapping[str, str], via_proxy: bool = False, **options: Any
) -> sa.Engine:
    """An engine bounded by the settings' timeouts (behind a proxy: see the module header)."""
    settings = Settings.from_env(environ)
    return create_ledger_engine(
        url,
        prepared_statements=not via_proxy,
        statement_timeout_ms=None if via_proxy else settings.db_statement_timeout_ms,
        socket_timeout_secs=settings.db_socket_timeout_secs,
        **options,
    )


def function_region(environ: Mapping[str, str] = os.environ) -> str:
    """The runtime's region, like its credentials: the database's tokens are signed for it."""
    found = next((environ[name] for name in REGION_VARIABLES if environ.get(name)), None)
    if found is None:
        raise DatabaseConfigError(
            f"set {' or '.join(REGION_VARIABLES)} (Lambda does): the database's IAM tokens are "
            "signed for the function's region"
        )
    return found


def admin_engine(environ: Mapping[str, str] = os.environ) -> sa.Engine | None:
    """An engine connected as the cluster's master user, from the secret in
    `CRONLEDGER_DB_ADMIN_SECRET_ARN` (given to `migrate` alone, and only without a proxy)."""
    arn = environ.get(DB_ADMIN_SECRET_ARN, "").strip()
    if not arn:
        return None
    from cronledger.targets.clients import default_clients  # loaded by `migrate` already

    endpoint = DatabaseEndpoint.from_env(environ)
    secret = json.loads(
        default_clients().secretsmanager().get_secret_value(SecretId=arn)["SecretString"]
    )
    url = endpoint.url().set(username=secret["username"], password=secret["password"])
    return _engine(url, environ, connect_args={"ssl_context": endpoint.tls()})
