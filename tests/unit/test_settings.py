from __future__ import annotations

from datetime import timedelta
from ipaddress import ip_network

import pytest
from pydantic import ValidationError

from cronledger.ledger import backend
from cronledger.settings import Settings, SettingsError


def test_an_empty_environment_gives_the_documented_defaults() -> None:
    settings = Settings.from_env({})

    assert settings.database_url == "sqlite:///.cronledger/cronledger.db"
    assert settings.poll_interval_ms == 1000
    assert settings.claim_batch_size == 20
    assert settings.claim_lease_secs == 60
    assert settings.heartbeat_interval_secs == 15
    assert settings.misfire_grace_secs == 5
    assert settings.max_catch_up == 100
    assert settings.default_timeout_ms == 60_000
    assert settings.max_in_flight == 200
    assert settings.lookahead_secs == 0
    assert settings.retention_hours == 720
    assert settings.execute_margin_ms == 2000
    assert settings.python_targets == ()
    assert settings.http_allow_networks == ()
    assert settings.secrets == "env"


def test_every_variable_is_read_from_its_prefixed_name() -> None:
    environ = {
        "CRONLEDGER_DATABASE_URL": "postgresql+pg8000://scheduler@db:5432/cron",
        "CRONLEDGER_POLL_INTERVAL_MS": "250",
        "CRONLEDGER_CLAIM_BATCH_SIZE": " 50 ",
        "CRONLEDGER_CLAIM_LEASE_SECS": "30",
        "CRONLEDGER_HEARTBEAT_INTERVAL_SECS": "10",
        "CRONLEDGER_MISFIRE_GRACE_SECS": "2",
        "CRONLEDGER_MAX_CATCH_UP": "1000",
        "CRONLEDGER_DEFAULT_TIMEOUT_MS": "90000",
        "CRONLEDGER_MAX_IN_FLIGHT": "8",
        "CRONLEDGER_LOOKAHEAD_SECS": "120",
        "CRONLEDGER_RETENTION_HOURS": "48",
        "CRONLEDGER_RECONCILE_SHARD_SIZE": "10000",
        "CRONLEDGER_RECONCILE_MAX_SHARDS": "8",
        "CRONLEDGER_EXECUTE_MARGIN_MS": "500",
        "CRONLEDGER_DB_STATEMENT_TIMEOUT_MS": "5000",
        "CRONLEDGER_DB_SOCKET_TIMEOUT_SECS": "8",
        "CRONLEDGER_PYTHON_TARGETS": "reports.jobs, billing",
        "CRONLEDGER_HTTP_ALLOW_NETWORKS": "10.20.0.0/16 ,fd12:3456::/48,192.0.2.7",
        "CRONLEDGER_SECRETS": "AWS",
        "CRONLEDGER_EVENTS_WEBHOOK_URL": "https://hooks.example.com/cron",
        "CRONLEDGER_EVENT_BUS_NAME": "prod-events",
        "CRONLEDGER_INSTALLATION": "prod",
        "CRONLEDGER_SOMETHING_ELSE": "belongs to another module",
    }

    settings = Settings.from_env(environ)

    assert settings.model_dump() == {
        "database_url": "postgresql+pg8000://scheduler@db:5432/cron",
        "poll_interval_ms": 250,
        "claim_batch_size": 50,
        "claim_lease_secs": 30,
        "heartbeat_interval_secs": 10,
        "misfire_grace_secs": 2,
        "max_catch_up": 1000,
        "default_timeout_ms": 90_000,
        "max_in_flight": 8,
        "lookahead_secs": 120,
        "retention_hours": 48,
        "reconcile_shard_size": 10_000,
        "reconcile_max_shards": 8,
        "execute_margin_ms": 500,
        "db_statement_timeout_ms": 5000,
        "db_socket_timeout_secs": 8,
        "python_targets": ("reports.jobs", "billing"),
        "http_allow_networks": (
            ip_network("10.20.0.0/16"),
            ip_network("fd12:3456::/48"),
            ip_network("192.0.2.7/32"),
        ),
        "secrets": "aws",
        "events_webhook_url": "https://hooks.example.com/cron",
        "event_bus_name": "prod-events",
        "installation": "prod",
    }


def test_a_heartbeat_as_long_as_the_lease_is_refused_naming_both_variables() -> None:
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"CRONLEDGER_HEARTBEAT_INTERVAL_SECS": "60"})

    assert refused.value.problems == [
        "CRONLEDGER_HEARTBEAT_INTERVAL_SECS=60 must be below CRONLEDGER_CLAIM_LEASE_SECS=60"
    ]


def test_a_socket_timeout_not_above_the_statement_timeout_is_refused() -> None:
    # the server's cancellation must arrive while the client still listens for it
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"CRONLEDGER_DB_SOCKET_TIMEOUT_SECS": "30"})

    assert refused.value.problems == [
        "CRONLEDGER_DB_SOCKET_TIMEOUT_SECS=30 must be above "
        "CRONLEDGER_DB_STATEMENT_TIMEOUT_MS=30000"
    ]


def test_the_database_timeout_defaults_are_the_ledgers_own() -> None:
    settings = Settings()
    assert settings.db_statement_timeout_ms == backend.STATEMENT_TIMEOUT_MS
    assert settings.db_socket_timeout_secs == backend.SOCKET_TIMEOUT_SECS


def test_a_grace_shorter_than_the_poll_interval_is_refused() -> None:
    with pytest.raises(SettingsError) as refused:
        Settings.from_env(
            {"CRONLEDGER_POLL_INTERVAL_MS": "3000", "CRONLEDGER_MISFIRE_GRACE_SECS": "2"}
        )

    (problem,) = refused.value.problems
    assert problem.startswith(
        "CRONLEDGER_MISFIRE_GRACE_SECS=2 must cover CRONLEDGER_POLL_INTERVAL_MS=3000"
    )
    assert "at least 3" in problem


@pytest.mark.parametrize("value", ["0", "1001"])
def test_max_catch_up_outside_one_to_a_thousand_is_refused(value: str) -> None:
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"CRONLEDGER_MAX_CATCH_UP": value})

    assert refused.value.problems == [f"CRONLEDGER_MAX_CATCH_UP={value} must be between 1 and 1000"]


def test_every_bad_variable_is_named_in_one_error_without_a_stack_dump() -> None:
    environ = {
        "CRONLEDGER_POLL_INTERVAL_MS": "fast",
        "CRONLEDGER_CLAIM_BATCH_SIZE": "0",
        "CRONLEDGER_LOOKAHEAD_SECS": "",
        "CRONLEDGER_MAX_IN_FLIGHT": "2.5",
    }

    with pytest.raises(SettingsError) as refused:
        Settings.from_env(environ)

    message = str(refused.value)
    for variable in environ:
        assert variable in message
    assert len(refused.value.problems) == 4
    assert "Traceback" not in message and "pydantic" not in message


def test_a_bad_database_url_is_named_without_repeating_its_password() -> None:
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"CRONLEDGER_DATABASE_URL": "hunter2-not-a-url"})

    assert "CRONLEDGER_DATABASE_URL" in str(refused.value)
    assert "hunter2" not in str(refused.value)


def test_settings_built_directly_obey_the_same_rules() -> None:
    with pytest.raises(SettingsError, match="HEARTBEAT_INTERVAL_SECS=20 must be below"):
        Settings(claim_lease_secs=20, heartbeat_interval_secs=20)


def test_settings_cannot_be_changed_after_start() -> None:
    settings = Settings()

    with pytest.raises(ValidationError, match="frozen"):
        settings.claim_lease_secs = 5  # type: ignore[misc]


def test_durations_are_offered_as_timedeltas() -> None:
    settings = Settings.from_env(
        {"CRONLEDGER_CLAIM_LEASE_SECS": "40", "CRONLEDGER_HEARTBEAT_INTERVAL_SECS": "10"}
    )

    assert settings.claim_lease == timedelta(seconds=40)
    assert settings.heartbeat_interval == timedelta(seconds=10)
    assert settings.renewal_give_up == timedelta(seconds=30)
    assert settings.poll_interval == timedelta(seconds=1)
    assert settings.misfire_grace == timedelta(seconds=5)
    assert settings.default_timeout == timedelta(minutes=1)
    assert settings.lookahead == timedelta(0)
    assert settings.execute_margin == timedelta(seconds=2)


def test_reading_the_process_environment_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRONLEDGER_CLAIM_BATCH_SIZE", "7")

    assert Settings.from_env().claim_batch_size == 7


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        (
            "CRONLEDGER_PYTHON_TARGETS",
            "reports.jobs,os.path:join,1st",
            "CRONLEDGER_PYTHON_TARGETS: 'os.path:join', '1st' not a module name; list module "
            "prefixes separated by commas, e.g. reports.jobs,billing.tasks",
        ),
        (
            "CRONLEDGER_HTTP_ALLOW_NETWORKS",
            "10.0.0.1/8,intranet",
            "CRONLEDGER_HTTP_ALLOW_NETWORKS: '10.0.0.1/8' (10.0.0.1/8 has host bits set); "
            "'intranet' ('intranet' does not appear to be an IPv4 or IPv6 network); list "
            "networks in CIDR form separated by commas, e.g. 10.20.0.0/16,fd12:3456::/48",
        ),
        (
            "CRONLEDGER_SECRETS",
            "vault",
            "CRONLEDGER_SECRETS='vault' must be env (env:CRONLEDGER_SECRET_* variables) or aws "
            "(Secrets Manager ARNs and SSM parameter names)",
        ),
    ],
)
def test_a_bad_target_policy_setting_is_refused_naming_the_variable(
    variable: str, value: str, problem: str
) -> None:
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({variable: value})

    assert refused.value.problems == [problem]


def test_an_empty_allow_list_is_allowed_and_means_nothing_is_allowed() -> None:
    settings = Settings.from_env(
        {"CRONLEDGER_PYTHON_TARGETS": "", "CRONLEDGER_HTTP_ALLOW_NETWORKS": " , "}
    )

    assert (settings.python_targets, settings.http_allow_networks) == ((), ())


def test_target_policy_settings_built_directly_obey_the_same_rules() -> None:
    with pytest.raises(SettingsError) as refused:
        Settings(python_targets=("ok.module", "not a module"), secrets="vault")  # type: ignore[arg-type]

    assert refused.value.problems == [
        "CRONLEDGER_PYTHON_TARGETS: 'not a module' is not a module name such as reports.jobs",
        "CRONLEDGER_SECRETS='vault' must be one of env, aws",
    ]
