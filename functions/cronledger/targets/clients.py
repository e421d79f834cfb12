"""AWS clients for the targets, the invoker, the API's wake and the migration, made once.

Clients are cached per service, region, read timeout (a synchronous call's budget, rounded up to
a whole second to keep the set small), retries and pool size. Nothing is imported until first
use, so a function that never calls AWS pays nothing for botocore at cold start. Clients come
from a botocore session: boto3's are the same, and boto3 loads more.
"""

from __future__ import annotations

import functools
import math
import threading
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from botocore.session import Session
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_lambda import LambdaClient
    from mypy_boto3_secretsmanager import SecretsManagerClient
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_ssm import SSMClient
    from mypy_boto3_stepfunctions import SFNClient

_CONNECT_TIMEOUT_SECS = 5.0
#: A secret is a small read from a nearby endpoint; an attempt must not wait a minute for it.
_SECRET_TIMEOUT_SECS = 5.0


class AwsClients:
    """A small client factory. `endpoint_url` points every client at one endpoint (LocalStack,
    or a test double speaking the service's wire protocol)."""

    def __init__(self, endpoint_url: str | None = None) -> None:
        self._session: Session | None = None
        self._endpoint_url = endpoint_url
        self._lock = threading.Lock()
        self._cached = functools.lru_cache(maxsize=32)(self._build)

    def lambda_(
        self,
        region: str | None = None,
        timeout_secs: float | None = None,
        *,
        retried: bool = False,
        connections: int | None = None,
    ) -> LambdaClient:
        """`retried`: for an invoke that is safe to repeat (an asynchronous dispatch); a
        retried synchronous invoke runs the function twice. `connections`: the pool's size, for
        a client used from that many threads at once (botocore keeps 10)."""
        client = self._client("lambda", region, timeout_secs, retried, connections)
        return cast("LambdaClient", client)

    def sqs(self, region: str | None = None, timeout_secs: float | None = None) -> SQSClient:
        return cast("SQSClient", self._client("sqs", region, timeout_secs))

    def stepfunctions(
        self, region: str | None = None, timeout_secs: float | None = None
    ) -> SFNClient:
        return cast("SFNClient", self._client("stepfunctions", region, timeout_secs))

    def events(
        self, region: str | None = None, timeout_secs: float | None = None, *, retried: bool = True
    ) -> EventBridgeClient:
        """`retried=False`: one try, for a send that something else repeats (the outbox)."""
        return cast("EventBridgeClient", self._client("events", region, timeout_secs, retried))

    def secretsmanager(self, region: str | None = None) -> SecretsManagerClient:
        client = self._client("secretsmanager", region, _SECRET_TIMEOUT_SECS)
        return cast("SecretsManagerClient", client)

    def ssm(self, region: str | None = None) -> SSMClient:
        return cast("SSMClient", self._client("ssm", region, _SECRET_TIMEOUT_SECS))

    def _client(
        self,
        service: str,
        region: str | None,
        timeout_secs: float | None,
        retried: bool = True,
        connections: int | None = None,
    ) -> Any:
        read_timeout = None if timeout_secs is None else float(math.ceil(timeout_secs))
        return self._cached(service, region, read_timeout, retried, connections)

    def _build(
        self,
        service: str,
        region: str | None,
        read_timeout: float | None,
        retried: bool,
        connections: int | None,
    ) -> Any:
        from botocore.config import Config

        options: dict[str, Any] = {
            "retries": {"mode": "standard", "total_max_attempts": 3 if retried else 1}
        }
        if connections is not None:
            options["max_pool_connections"] = connections
        if read_timeout is not None:
            options["read_timeout"] = max(read_timeout, 0.1)
            options["connect_timeout"] = min(_CONNECT_TIMEOUT_SECS, max(read_timeout, 0.1))
        # A botocore Session is not thread-safe while it builds clients.
        with self._lock:
            if self._session is None:
                import botocore.session

                self._session = botocore.session.Session()
            return self._session.create_client(
                service,
                region_name=region,
                endpoint_url=self._endpoint_url,
                config=Config(**options),
            )


def arn_region(name_or_arn: str) -> str | None:
    """The region an ARN names; None for a bare name (the client's own region applies)."""
    return name_or_arn.split(":")[3] if name_or_arn.startswith("arn:") else None


_DEFAULT = AwsClients()


def default_clients() -> AwsClients:
    """The process-wide factory (region and credentials from the environment, on first use)."""
    return _DEFAULT
