"""How a function reaches the ledger: through RDS Proxy with an IAM token per connection,
inside verified TLS, never with a password from the environment; or a whole URL, which wins."""

from __future__ import annotations

import ssl
from typing import Any
from urllib.parse import parse_qs

import pytest

from cronledger.aws import database
from cronledger.aws.database import DatabaseConfigError, ledger_engine
from cronledger.ledger import Ledger, connecting
from tests.aws.invocations import REGION

PROXY = "cronledger-proxy.proxy-c0ffee.us-east-1.rds.amazonaws.com"
STACK_ENV = {
    database.DB_HOST: PROXY,
    database.DB_PORT: "5432",
    database.DB_NAME: "cronledger",
    database.DB_USER: "cronledger",
    database.DB_IAM_AUTH: "true",
}


class NotConnecting(Exception):
    """Stands in for the network: the test reads what would have been sent."""


def test_every_new_connection_to_the_proxy_presents_an_iam_token_inside_verified_tls(
    aws: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given connections recording what they are asked to connect with, instead of connecting
    asked = recorded_connections(monkeypatch)
    engine = ledger_engine(STACK_ENV)

    # When the engine opens two connections
    for _ in range(2):
        with pytest.raises(NotConnecting):
            engine.connect()

    # Then each went to the proxy as the IAM user, with a token signed for it as the password
    assert len(asked) == 2
    for parameters in asked:
        assert (parameters["host"], parameters["port"]) == (PROXY, 5432)
        assert (parameters["user"], parameters["database"]) == ("cronledger", "cronledger")
        endpoint, _, query = parameters["password"].partition("/?")
        signed = parse_qs(query)
        assert endpoint == f"{PROXY}:5432"
        assert (signed["Action"], signed["DBUser"]) == (["connect"], ["cronledger"])
        assert signed["X-Amz-Credential"][0].endswith("/us-east-1/rds-db/aws4_request")
        assert len(signed["X-Amz-Signature"][0]) == 64
        # and inside TLS that checks the proxy's certificate and name
        context = parameters["ssl_context"]
        assert isinstance(context, ssl.SSLContext)
        assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
        # and no statement is prepared on the session (the proxy would pin it to one backend)
        assert parameters["prepared_statements"] is False
    assert engine.url.password is None


def test_the_token_is_the_one_an_rds_client_signs_without_building_one(aws: None) -> None:
    # Given the token an RDS client signs for the stack's endpoint and user (a user name that
    # needs escaping in a query string)
    import boto3

    endpoint = database.DatabaseEndpoint(PROXY, 5432, "cronledger", "cron+ledger@ops")
    rds = boto3.client("rds")
    for _ in range(3):  # both signed within one second (X-Amz-Date) compare byte for byte
        expected = rds.generate_db_auth_token(endpoint.host, endpoint.port, endpoint.user)
        token = endpoint.iam_token(REGION)
        if parse_qs(token)["X-Amz-Date"] == parse_qs(expected)["X-Amz-Date"]:
            break
    # Then the function's own signature is the same token
    assert token == expected


def test_without_a_region_or_credentials_a_token_is_refused_naming_them(
    aws: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in database.REGION_VARIABLES:
        monkeypatch.delenv(name)
    with pytest.raises(DatabaseConfigError, match="AWS_REGION or AWS_DEFAULT_REGION"):
        ledger_engine(STACK_ENV)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    endpoint = database.DatabaseEndpoint.from_env(STACK_ENV)
    with pytest.raises(DatabaseConfigError, match="AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"):
        endpoint.iam_token(REGION)


def test_a_database_url_wins_over_the_stacks_proxy_settings(pg_database_url: str) -> None:
    engine = ledger_engine({**STACK_ENV, database.DATABASE_URL: pg_database_url})
    try:
        assert engine.url.render_as_string(hide_password=False) == pg_database_url
        assert Ledger(engine).db_now() is not None
        with engine.connect() as conn:  # no proxy: statements are prepared
            assert conn.connection.driver_connection.prepared_statements is True
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("environment", "named"),
    [
        ({}, "CRONLEDGER_DB_HOST, CRONLEDGER_DB_NAME, CRONLEDGER_DB_USER"),
        ({**STACK_ENV, database.DB_IAM_AUTH: "false"}, "CRONLEDGER_DB_IAM_AUTH must be true"),
        ({k: v for k, v in STACK_ENV.items() if k != database.DB_IAM_AUTH}, "IAM tokens"),
        ({**STACK_ENV, database.DB_PORT: "postgres"}, "CRONLEDGER_DB_PORT='postgres'"),
        ({**STACK_ENV, database.DB_PROXY: "maybe"}, "CRONLEDGER_DB_PROXY='maybe'"),
    ],
)
def test_without_a_url_or_the_proxy_with_iam_auth_a_function_refuses_naming_what_to_set(
    environment: dict[str, str], named: str
) -> None:
    with pytest.raises(DatabaseConfigError) as refused:
        ledger_engine(environment)
    assert named in str(refused.value)


CLUSTER = "cronledger.cluster-c0ffee.us-east-1.rds.amazonaws.com"
DIRECT_ENV = {**STACK_ENV, database.DB_HOST: CLUSTER, database.DB_PROXY: "false"}


def recorded_connections(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    asked: list[dict[str, Any]] = []

    def connect(**parameters: Any) -> None:
        asked.append(parameters)
        raise NotConnecting

    monkeypatch.setattr(connecting, "open_connection", connect)
    return asked


def test_without_a_proxy_a_connection_goes_to_the_cluster_verified_against_the_rds_roots(
    aws: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the lean profile's environment: the cluster's endpoint, no proxy
    asked = recorded_connections(monkeypatch)
    engine = ledger_engine(DIRECT_ENV)

    with pytest.raises(NotConnecting):
        engine.connect()

    # Then it presents an IAM token signed for the cluster, inside TLS that checks the name
    # and trusts the Amazon RDS roots (not the public ones a proxy's certificate chains to)
    (parameters,) = asked
    assert parameters["host"] == CLUSTER and parameters["password"].startswith(f"{CLUSTER}:5432/?")
    context = parameters["ssl_context"]
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    roots = {
        value
        for cert in context.get_ca_certs()
        for field in cert["subject"]
        for key, value in field
        if key == "commonName"
    }
    assert "Amazon RDS us-east-1 Root CA RSA2048 G1" in roots
    assert all(name.startswith("Amazon RDS ") for name in roots)
    # and statements are prepared on the session, as nothing pins it
    assert parameters["prepared_statements"] is True


def test_the_shipped_rds_roots_cover_every_region_with_each_key_kind() -> None:
    context = ssl.create_default_context(cafile=str(database.RDS_CA_BUNDLE))
    names = [
        value
        for cert in context.get_ca_certs()
        for field in cert["subject"]
        for key, value in field
        if key == "commonName"
    ]
    regions = {name.split()[2] for name in names}
    assert {"us-east-1", "eu-west-1", "ap-southeast-2", "sa-east-1"} <= regions
    for kind in ("RSA2048 G1", "RSA4096 G1", "ECC384 G1"):
        assert {n.split()[2] for n in names if n.endswith(kind)} == regions


def test_only_migrate_without_a_proxy_connects_as_the_master_user_from_its_secret(
    aws: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the master user's secret, as RDS writes it, named where the stack names it
    import boto3

    arn = boto3.client("secretsmanager").create_secret(
        Name="cronledger-admin",
        SecretString='{"username": "cronledger_admin", "password": "s3cret", "engine": "postgres"}',
    )["ARN"]
    asked = recorded_connections(monkeypatch)
    assert database.admin_engine(DIRECT_ENV) is None  # no secret named: no admin engine

    admin = database.admin_engine({**DIRECT_ENV, database.DB_ADMIN_SECRET_ARN: arn})
    assert admin is not None
    with pytest.raises(NotConnecting):
        admin.connect()

    # Then it logs in to the cluster with the secret's password, in the same verified TLS
    (parameters,) = asked
    assert (parameters["user"], parameters["password"]) == ("cronledger_admin", "s3cret")
    assert parameters["host"] == CLUSTER
    assert parameters["ssl_context"].check_hostname
