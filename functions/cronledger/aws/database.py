"""How a Lambda container reaches the ledger: through RDS Proxy, over TLS, as an IAM user.

The stack tells the functions where the database is (`CRONLEDGER_DB_HOST`, `_PORT`, `_NAME`,
`_USER`) and that the proxy wants IAM authentication (`CRONLEDGER_DB_IAM_AUTH=true`); it never
gives them a password. So every new connection presents a fresh authentication token, signed
with the function's own role at connect time (signing is local, no network call; a token is
good for 15 minutes and is needed only to connect), inside a default TLS context that verifies
the proxy's certificate and host name (the proxy's certificate chains to Amazon's public root,
which the runtime's trust store holds). The engine is built once per container; its small
pool checks a connection that sat idle before using it (`cronledger.ledger.driver`), because
the proxy may close an idle connection between invocations.

Every connection is bounded in time (`CRONLEDGER_DB_STATEMENT_TIMEOUT_MS`, `…_SOCKET_TIMEOUT_SECS`,
see `cronledger.ledger.backend`). RDS Proxy refuses startup parameters and would pin a session
that sets one, so behind it the statement timeout is the database's default, which the
deploy's migration sets from the same variable (`cronledger.aws.migrate`).

`CRONLEDGER_DATABASE_URL`, when set, wins: the tests and a database outside the stack give a
whole URL instead.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import event

from cronledger.errors import CronledgerError
from cronledger.ledger import create_ledger_engine
from cronledger.settings import Settings
from cronledger.targets.clients import default_clients

if TYPE_CHECKING:
    from mypy_boto3_rds import RDSClient

DATABASE_URL = "CRONLEDGER_DATABASE_URL"
DB_HOST = "CRONLEDGER_DB_HOST"
DB_PORT = "CRONLEDGER_DB_PORT"
DB_NAME = "CRONLEDGER_DB_NAME"
DB_USER = "CRONLEDGER_DB_USER"
DB_IAM_AUTH = "CRONLEDGER_DB_IAM_AUTH"
DEFAULT_PORT = 5432
#: One invocation at a time per container: the calling thread, plus an executor's heartbeat
#: beside a target that may use the database itself.
PROXY_POOL: dict[str, Any] = {"pool_size": 1, "max_overflow": 2}


class DatabaseConfigError(CronledgerError):
    """The environment does not say how to reach the database; the message names what to set."""


@dataclass(frozen=True, slots=True)
class ProxyEndpoint:
    host: str
    port: int
    database: str
    user: str

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ProxyEndpoint:
        missing = [name for name in (DB_HOST, DB_NAME, DB_USER) if not environ.get(name)]
        if missing:
            raise DatabaseConfigError(
                f"set {', '.join(missing)} (the stack does), or {DATABASE_URL} for a database "
                "outside it"
            )
        if environ.get(DB_IAM_AUTH, "").strip().lower() != "true":
            raise DatabaseConfigError(
                f"{DB_IAM_AUTH} must be true: the functions authenticate to RDS Proxy with IAM "
                "tokens and never hold a password"
            )
        raw_port = environ.get(DB_PORT, str(DEFAULT_PORT))
        try:
            port = int(raw_port)
        except ValueError:
            raise DatabaseConfigError(f"{DB_PORT}={raw_port!r} is not a port number") from None
        return cls(environ[DB_HOST], port, environ[DB_NAME], environ[DB_USER])

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
    """A SQLAlchemy `do_connect` hook: signs a token for this endpoint and user into the
    parameters of each new connection, as its password."""

    def __init__(self, endpoint: ProxyEndpoint, client: RDSClient) -> None:
        self._endpoint = endpoint
        self._client = client

    def __call__(self, _dialect: Any, _record: Any, _cargs: Any, cparams: dict[str, Any]) -> None:
        cparams["password"] = self._client.generate_db_auth_token(
            DBHostname=self._endpoint.host,
            Port=self._endpoint.port,
            DBUsername=self._endpoint.user,
        )


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
    endpoint = ProxyEndpoint.from_env(environ)
    engine = create_ledger_engine(
        endpoint.url(),
        prepared_statements=False,  # RDS Proxy would pin every container's session
        statement_timeout_ms=None,  # the database's default (the proxy takes no startup option)
        socket_timeout_secs=settings.db_socket_timeout_secs,
        connect_args={"ssl_context": ssl.create_default_context()},
        **PROXY_POOL,
    )
    event.listen(engine, "do_connect", IamAuthToken(endpoint, default_clients().rds()))
    return engine
