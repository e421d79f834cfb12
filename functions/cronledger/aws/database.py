"""How a Lambda container reaches the ledger: over verified TLS, as an IAM user, through RDS
Proxy (the `standard` and `ha` profiles) or straight to the Aurora cluster (`lean`).

The stack tells the functions where the database is (`CRONLEDGER_DB_HOST`, `_PORT`, `_NAME`,
`_USER`), whether that is a proxy (`CRONLEDGER_DB_PROXY`, true unless it says false) and that
it wants IAM authentication (`CRONLEDGER_DB_IAM_AUTH=true`); it never gives them a password.
So every new connection presents a fresh authentication token, signed with the function's own
role at connect time (signing is local, no network call; a token is good for 15 minutes and is
needed only to connect). The token is what an RDS client's `generate_db_auth_token` makes, a
SigV4 presigned `connect` URL for the `rds-db` service, signed by the same botocore signer with
the credentials Lambda puts in the function's environment, but without building an RDS client,
which would load the RDS service model (as much work as a fifth of a handler's import) for one
local signature; botocore's signer is loaded by the first connection. The token travels inside
a TLS context that verifies the server's certificate and host name: a proxy's chains to
Amazon's public roots, which the runtime's trust store holds; the cluster's to the Amazon RDS
roots shipped beside this module (`rds-ca-bundle.pem`). Through a proxy no statement is
prepared on the session (it would pin the session to one backend); straight to the cluster they
are, as locally. The engine is built once per container; its small pool checks a connection
that sat idle before using it (`cronledger.ledger.driver`), because the server may close an
idle connection between invocations. Every container holds at most `PROXY_POOL`'s connections,
which the stack counts in its connection budget (infra/cronledger_infra/capacity.py).

Without a proxy `migrate` connects as the schema's owner, the cluster's master user, with its
password (an IAM login would cost it the password its rotation uses), from the secret only it
is named (`CRONLEDGER_DB_ADMIN_SECRET_ARN`, `admin_engine`).

Every connection is bounded in time (`CRONLEDGER_DB_STATEMENT_TIMEOUT_MS`, `…_SOCKET_TIMEOUT_SECS`,
see `cronledger.ledger.backend`). RDS Proxy refuses startup parameters and would pin a session
that sets one, so behind it the statement timeout is the database's default, which the
deploy's migration sets from the same variable (`cronledger.aws.migrate`); straight to the
cluster, each session sets it.

`CRONLEDGER_DATABASE_URL`, when set, wins: the tests and a database outside the stack give a
whole URL instead.
"""

from __future__ import annotations

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
        if self.via_proxy:
            return ssl.create_default_context()
        return ssl.create_default_context(cafile=str(RDS_CA_BUNDLE))

    def url(self) -> sa.URL:
        """The URL without a password: the token is added per connection."""
        return sa.URL.create(
            "postgresql+pg8000",
            username=self.user,
            host=self.host,
            port=self.port,
            database=self.database,
        )


class IamAuthToken:
    """Signs a token for this endpoint and user, the password each new connection presents
    (see the module header)."""

    def __init__(self, endpoint: DatabaseEndpoint, region: str) -> None:
        self._endpoint = endpoint
        self._region = region

    def token(self) -> str:
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
            url=f"https://{self._endpoint.host}:{self._endpoint.port}/",
            data={"Action": "connect", "DBUser": self._endpoint.user},
        )
        SigV4QueryAuth(credentials, "rds-db", self._region, expires=TOKEN_SECS).add_auth(request)
        return str(request.url).removeprefix("https://")


def ledger_engine(environ: Mapping[str, str] = os.environ) -> sa.Engine:
    """The engine for this container's ledger, from the environment (see the module header)."""
    settings = Settings.from_env(environ)
    url = environ.get(DATABASE_URL, "").strip()
    if url:
        return create_ledger_engine(
            url,
            statement_timeout_ms=settings.db_statement_timeout_ms,
            socket_timeout_secs=settings.db_socket_timeout_secs,
        )
    endpoint = DatabaseEndpoint.from_env(environ)
    return create_ledger_engine(
        endpoint.url(),
        prepared_statements=not endpoint.via_proxy,  # a proxy would pin every session
        # the proxy takes no startup option: behind it, the database's default
        statement_timeout_ms=None if endpoint.via_proxy else settings.db_statement_timeout_ms,
        socket_timeout_secs=settings.db_socket_timeout_secs,
        password=IamAuthToken(endpoint, function_region()).token,
        connect_args={"ssl_context": endpoint.tls()},
        **PROXY_POOL,
    )


def function_region(environ: Mapping[str, str] = os.environ) -> str:
    """The function's region, which its database tokens are signed for: the runtime's, like
    its credentials, not one of the stack's settings."""
    found = next((environ[name] for name in REGION_VARIABLES if environ.get(name)), None)
    if found is None:
        raise DatabaseConfigError(
            f"set {' or '.join(REGION_VARIABLES)} (Lambda does): the database's IAM tokens are "
            "signed for the function's region"
        )
    return found


def admin_engine(environ: Mapping[str, str] = os.environ) -> sa.Engine | None:
    """An engine connected as the cluster's master user, from the secret the stack names in
    `CRONLEDGER_DB_ADMIN_SECRET_ARN` (only `migrate` is given it, and only without a proxy);
    None when it names none. Same cluster, same verified TLS."""
    arn = environ.get(DB_ADMIN_SECRET_ARN, "").strip()
    if not arn:
        return None
    from cronledger.targets.clients import default_clients  # loaded by `migrate` already

    endpoint = DatabaseEndpoint.from_env(environ)
    secret = json.loads(
        default_clients().secretsmanager().get_secret_value(SecretId=arn)["SecretString"]
    )
    url = sa.URL.create(
        "postgresql+pg8000",
        username=secret["username"],
        password=secret["password"],
        host=endpoint.host,
        port=endpoint.port,
        database=endpoint.database,
    )
    settings = Settings.from_env(environ)
    return create_ledger_engine(
        url,
        statement_timeout_ms=settings.db_statement_timeout_ms,
        socket_timeout_secs=settings.db_socket_timeout_secs,
        connect_args={"ssl_context": endpoint.tls()},
    )
