"""What a target document may name beyond its target (SPEC §10), checked when it is saved:
Python functions only from allowed modules, no private address in any spelling, no credential
in plain settings, secrets only by reference."""

from __future__ import annotations

from ipaddress import ip_address, ip_network
from typing import Any

import pytest

from cronledger.targets import target_errors
from cronledger.targets.addresses import literal_address
from cronledger.targets.policy import TargetPolicy

NOTHING = TargetPolicy()
TESTS = TargetPolicy(python_modules=("tests.unit",))


def one_error(doc: dict[str, Any], policy: TargetPolicy = NOTHING) -> tuple[str, str, str]:
    (error,) = target_errors(doc, policy)
    return error.path, error.code, error.message


def http(url: str, **more: Any) -> dict[str, Any]:
    return {"type": "http", "url": url, **more}


# --- python targets -----------------------------------------------------------------------


def test_by_default_no_python_target_is_allowed_and_the_message_names_the_setting() -> None:
    assert one_error({"type": "python", "callable": "subprocess:getoutput"}) == (
        "target.callable",
        "invalid",
        "subprocess is not in CRONLEDGER_PYTHON_TARGETS (allowed: none); the operator lists "
        "the modules whose functions python targets may call",
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "threading:settrace",
            "threading is not in CRONLEDGER_PYTHON_TARGETS (allowed: tests.unit); the operator "
            "lists the modules whose functions python targets may call",
        ),
        (
            "faulthandler:_sigsegv",
            "faulthandler is not in CRONLEDGER_PYTHON_TARGETS (allowed: tests.unit); the "
            "operator lists the modules whose functions python targets may call",
        ),
        (
            "tests.unitary:run",  # a prefix covers its submodules, not every name it starts
            "tests.unitary is not in CRONLEDGER_PYTHON_TARGETS (allowed: tests.unit); the "
            "operator lists the modules whose functions python targets may call",
        ),
        (
            "tests.unit.fixtures_policy:getoutput",
            "tests.unit.fixtures_policy:getoutput is subprocess.getoutput, defined outside "
            "CRONLEDGER_PYTHON_TARGETS; name the function where it is defined",
        ),
        (
            "tests.unit.fixtures_policy:_helper",
            "tests.unit.fixtures_policy:_helper is private (its name starts with '_'); name a "
            "public function",
        ),
        (
            "tests.unit.fixtures_policy:Job",
            "tests.unit.fixtures_policy:Job is type, not a plain function defined with def",
        ),
        (
            "tests.unit.fixtures_policy:instance",
            "tests.unit.fixtures_policy:instance is Job, not a plain function defined with def",
        ),
        (
            "tests.unit.fixtures_policy:later",
            "tests.unit.fixtures_policy:later is an async function, not a plain function "
            "defined with def",
        ),
        (
            "tests.unit.fixtures_policy:print",
            "tests.unit.fixtures_policy:print is builtin_function_or_method, not a plain "
            "function defined with def",
        ),
        (
            "tests.unit.fixtures_policy:absent",
            "tests.unit.fixtures_policy has no function 'absent'",
        ),
        (
            "tests.unit.broken_on_import:run",
            "cannot import tests.unit.broken_on_import: ModuleNotFoundError: No module named "
            "'tests.unit.broken_on_import'",
        ),
    ],
)
def test_a_python_target_must_name_a_public_function_defined_in_an_allowed_module(
    spec: str, message: str
) -> None:
    assert one_error({"type": "python", "callable": spec}, TESTS) == (
        "target.callable",
        "invalid",
        message,
    )


def test_an_allowed_function_is_resolved_and_accepted() -> None:
    assert (
        target_errors({"type": "python", "callable": "tests.unit.fixtures_policy:run"}, TESTS) == []
    )


# --- http addresses -----------------------------------------------------------------------


BLOCKED_URLS = [
    ("http://169.254.169.254/latest/meta-data/", "169.254.169.254", "a link-local"),
    ("http://2852039166/", "2852039166 (169.254.169.254)", "a link-local"),
    ("http://0xa9fea9fe/", "0xa9fea9fe (169.254.169.254)", "a link-local"),
    ("http://0xA9.0xFE.0xA9.0xFE/", "0xa9.0xfe.0xa9.0xfe (169.254.169.254)", "a link-local"),
    ("http://0251.0376.0251.0376/", "0251.0376.0251.0376 (169.254.169.254)", "a link-local"),
    ("http://169.254.43518/", "169.254.43518 (169.254.169.254)", "a link-local"),
    (
        "http://[::ffff:169.254.169.254]/",
        "::ffff:169.254.169.254 (169.254.169.254)",
        "a link-local",
    ),
    ("http://[::ffff:a9fe:a9fe]/", "::ffff:a9fe:a9fe (169.254.169.254)", "a link-local"),
    ("http://[64:ff9b::a9fe:a9fe]/", "64:ff9b::a9fe:a9fe (169.254.169.254)", "a link-local"),
    ("http://[2002:a9fe:a9fe::1]/", "2002:a9fe:a9fe::1 (169.254.169.254)", "a link-local"),
    ("http://[fd00:ec2::254]/", "fd00:ec2::254", "a unique-local"),
    ("http://[fe80::1%25eth0]/", "fe80::1%25eth0 (fe80::1)", "a link-local"),
    ("http://localhost:5432/", "localhost (127.0.0.1)", "a loopback"),
    ("http://api.localhost/", "api.localhost (127.0.0.1)", "a loopback"),
    ("http://LOCALHOST./", "localhost. (127.0.0.1)", "a loopback"),
    ("http://127.0.0.1:8080/", "127.0.0.1", "a loopback"),
    ("http://127.1/", "127.1 (127.0.0.1)", "a loopback"),
    ("http://0177.0.0.1/", "0177.0.0.1 (127.0.0.1)", "a loopback"),
    ("http://2130706433/", "2130706433 (127.0.0.1)", "a loopback"),
    ("http://[::1]:8080/", "::1", "a loopback"),
    ("http://[0:0:0:0:0:0:0:1]/", "0:0:0:0:0:0:0:1 (::1)", "a loopback"),
    ("http://[::ffff:127.0.0.1]/", "::ffff:127.0.0.1 (127.0.0.1)", "a loopback"),
    ("http://[::127.0.0.1]/", "::127.0.0.1 (127.0.0.1)", "a loopback"),
    ("http://[64:ff9b:1::a00:1]/", "64:ff9b:1::a00:1 (10.0.0.1)", "a private"),
    ("https://10.1.2.3/", "10.1.2.3", "a private"),
    ("https://172.16.0.1/", "172.16.0.1", "a private"),
    ("https://172.31.255.255/", "172.31.255.255", "a private"),
    ("https://192.168.1.1/", "192.168.1.1", "a private"),
    ("https://100.64.0.1/", "100.64.0.1", "a CGNAT (shared address space)"),
    ("https://[fc00::1]/", "fc00::1", "a unique-local"),
    ("https://224.0.0.1/", "224.0.0.1", "a multicast"),
    ("https://[ff02::1]/", "ff02::1", "a multicast"),
    ("http://0.0.0.0:8080/", "0.0.0.0", "an unspecified"),
    ("http://0/", "0 (0.0.0.0)", "an unspecified"),
    ("http://[::]/", "::", "an unspecified"),
    ("https://240.0.0.1/", "240.0.0.1", "a reserved"),
    ("https://255.255.255.255/", "255.255.255.255", "a reserved"),
    ("https://192.0.2.10/", "192.0.2.10", "a reserved"),
]


@pytest.mark.parametrize(("url", "named", "label"), BLOCKED_URLS)
def test_an_http_target_at_a_non_public_address_is_refused_in_every_spelling(
    url: str, named: str, label: str
) -> None:
    path, code, message = one_error(http(url))

    assert (path, code) == ("target.url", "invalid")
    assert message.startswith(f"{named} is {label}")
    assert (
        message.endswith(
            "address; http targets reach only public addresses unless "
            "CRONLEDGER_HTTP_ALLOW_NETWORKS lists the network"
        )
        or "address (" in message
    )


def test_the_metadata_message_is_exact() -> None:
    assert one_error(http("http://2852039166/latest/")) == (
        "target.url",
        "invalid",
        "2852039166 (169.254.169.254) is a link-local (instance metadata lives there) address; "
        "http targets reach only public addresses unless CRONLEDGER_HTTP_ALLOW_NETWORKS lists "
        "the network",
    )


@pytest.mark.parametrize(
    "url",
    [
        "https://example.com/hook",
        "https://93.184.215.14/hook",
        "https://[2606:4700:4700::1111]/hook",
        "https://[::ffff:93.184.215.14]/hook",  # a public IPv4 address, IPv4-mapped
        "https://internal.example.com/hook",  # a name: judged after resolution, at run time
        "https://xn--bcher-kva.example/hook",
    ],
)
def test_public_addresses_and_names_are_accepted(url: str) -> None:
    assert target_errors(http(url), NOTHING) == []


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("http://10.1.2.3/hook", "10.0.0.0/8"),
        ("http://[::ffff:10.1.2.3]/hook", "10.0.0.0/8"),
        ("http://localhost:8080/hook", "127.0.0.0/8"),
        ("http://[fd12:3456::9]/hook", "fd12:3456::/48"),
    ],
)
def test_a_network_the_operator_allowed_may_be_reached(url: str, allowed: str) -> None:
    policy = TargetPolicy(http_allow_networks=(ip_network(allowed),))

    assert target_errors(http(url), policy) == []


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("2852039166", "169.254.169.254"),
        ("[::ffff:7f00:1]", "::ffff:7f00:1"),
        ("example.com", None),
        ("deadbeef", None),
        ("1.2.3.4.5", None),
    ],
)
def test_literal_addresses_are_read_as_the_resolver_reads_them(
    host: str, address: str | None
) -> None:
    assert literal_address(host) == (ip_address(address) if address else None)


# --- http URLs and headers ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("https://example.com/a\r\nX-Evil: 1", "url must not contain spaces or control characters"),
        ("https://example.com/a b", "url must not contain spaces or control characters"),
        ("https://example.com/\x00", "url must not contain spaces or control characters"),
        ("https://example.com/\x7f", "url must not contain spaces or control characters"),
        (
            "https://exämple.com/",
            "url must be ASCII: percent-encode other characters and write an international "
            "domain name in its xn-- form",
        ),
        (
            "http://１２７.０.０.１/",  # noqa: RUF001  (fullwidth digits IDNA reads as 127.0.0.1)
            "url must be ASCII: percent-encode other characters and write an international "
            "domain name in its xn-- form",
        ),
        ("https://example.com:99999/", "url's port must be a number from 1 to 65535"),
        ("https://u:p@example.com/", "url must not carry a user name or password"),
        ("https://u@example.com/", "url must not carry a user name or password"),
    ],
)
def test_urls_with_control_characters_or_odd_spellings_are_refused(url: str, message: str) -> None:
    assert one_error(http(url)) == ("target.url", "invalid", message)


@pytest.mark.parametrize(
    "query",
    ["access_key=abc", "X-Amz-Signature=abc", "sig=abc", "token=abc", "apiKey=abc", "pass=x"],
)
def test_credential_looking_query_parameters_are_refused(query: str) -> None:
    path, code, message = one_error(http(f"https://example.com/hook?{query}"))

    assert (path, code) == ("target.url", "invalid")
    assert "looks like a credential" in message


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("Authorization", "anything"),
        ("Authorisation", "anything"),
        ("X-Authentication", "anything"),
        ("X-OAuth", "anything"),
        ("X-Access-Key", "anything"),
        ("X-Private-Key", "anything"),
        ("X-Api-Key", "anything"),
        ("apikey", "anything"),
        ("X_API_KEY", "anything"),
        ("xApiKey", "anything"),
        ("X-Refresh-Token", "anything"),
        ("X-AccessToken", "anything"),
        ("X-Passphrase", "anything"),
        ("X-Password", "anything"),
        ("X-Pwd", "anything"),
        ("X-Client-Secret", "anything"),
        ("Cookie", "session=abc"),
        ("X-Session-Id", "abc"),
        ("X-Signature", "abc"),
        ("X-Hub-Sig", "abc"),
        ("X-Credentials", "abc"),
        ("X-Caller", "bearer:abc"),
        ("X-Caller", "Bearer abc"),
        ("X-Caller", "basic=dXNlcjpwYXNz"),
        ("X-Caller", "Token abc"),
        ("X-Caller", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig"),
        ("X-Caller", "AKIAABCDEFGHIJKLMNOP"),
        ("X-Caller", "-----BEGIN PRIVATE KEY-----"),
        ("X-Caller", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"),
        ("X-Caller", "xoxb-1234567890-abcdefghij"),
        ("X-Caller", "AWS4-HMAC-SHA256 Credential=AKIA/20260101/us-east-1/s3"),
    ],
)
def test_credential_looking_plain_headers_are_refused_pointing_at_secret_headers(
    name: str, value: str
) -> None:
    assert one_error(http("https://example.com/hook", headers={name: value})) == (
        f"target.headers.{name}",
        "invalid",
        f"header {name} looks like a credential; target settings are stored in plain text, so "
        "give it as a secret_headers reference (e.g. 'env:CRONLEDGER_SECRET_HOOK_TOKEN')",
    )


@pytest.mark.parametrize(
    "value", ["a\r\nX-Evil: 1", "a\nb", "a\x00", "a\x1b[31m", "a\x7f", "caf\u00e9", "a\u2028b"]
)
def test_header_values_with_control_or_non_ascii_characters_are_refused(value: str) -> None:
    assert one_error(http("https://example.com/hook", headers={"X-Note": value})) == (
        "target.headers.X-Note",
        "invalid",
        "header X-Note must be one line of printable ASCII (no control characters)",
    )


# --- secret headers -----------------------------------------------------------------------

ENV = TargetPolicy(secrets="env")
AWS = TargetPolicy(secrets="aws")


@pytest.mark.parametrize(
    ("policy", "reference"),
    [
        (ENV, "env:CRONLEDGER_SECRET_HOOK_TOKEN"),
        (AWS, "arn:aws:secretsmanager:eu-west-1:123456789012:secret:hook-token-AbCdEf"),
        (AWS, "/cronledger/prod/hook-token"),
        (AWS, "hook-token"),
        (AWS, "arn:aws:ssm:eu-west-1:123456789012:parameter/cronledger/hook-token"),
    ],
)
def test_a_secret_header_names_a_reference_of_the_configured_source(
    policy: TargetPolicy, reference: str
) -> None:
    doc = http("https://example.com/hook", secret_headers={"Authorization": reference})

    assert target_errors(doc, policy) == []


@pytest.mark.parametrize(
    ("policy", "reference", "message"),
    [
        (
            ENV,
            "env:AWS_SECRET_ACCESS_KEY",
            "a secret reference is env:CRONLEDGER_SECRET_<NAME>, a variable of the scheduler's "
            "environment set aside for targets (CRONLEDGER_SECRETS=env), e.g. "
            "'env:CRONLEDGER_SECRET_HOOK_TOKEN'",
        ),
        (
            ENV,
            "Bearer abc",
            "a secret reference is env:CRONLEDGER_SECRET_<NAME>, a variable of the scheduler's "
            "environment set aside for targets (CRONLEDGER_SECRETS=env), e.g. "
            "'env:CRONLEDGER_SECRET_HOOK_TOKEN'",
        ),
        (
            AWS,
            "env:CRONLEDGER_SECRET_HOOK_TOKEN",
            "a secret reference is a Secrets Manager secret ARN or an SSM parameter name "
            "(CRONLEDGER_SECRETS=aws), e.g. "
            "'arn:aws:secretsmanager:eu-west-1:123456789012:secret:hook-token-AbCdEf'",
        ),
        (
            AWS,
            "Bearer abc",
            "a secret reference is a Secrets Manager secret ARN or an SSM parameter name "
            "(CRONLEDGER_SECRETS=aws), e.g. "
            "'arn:aws:secretsmanager:eu-west-1:123456789012:secret:hook-token-AbCdEf'",
        ),
    ],
)
def test_a_secret_header_that_is_not_a_reference_is_refused(
    policy: TargetPolicy, reference: str, message: str
) -> None:
    doc = http("https://example.com/hook", secret_headers={"Authorization": reference})

    assert one_error(doc, policy) == ("target.secret_headers.Authorization", "invalid", message)


def test_secret_headers_cannot_repeat_a_plain_header_or_set_what_cronledger_sets() -> None:
    doc = http(
        "https://example.com/hook",
        headers={"X-Team": "ops"},
        secret_headers={
            "x-team": "env:CRONLEDGER_SECRET_A",
            "Host": "env:CRONLEDGER_SECRET_B",
            "Bad Name": "env:CRONLEDGER_SECRET_C",
            "X-Number": 7,
        },
    )

    assert [(e.path, e.message) for e in target_errors(doc, ENV)] == [
        ("target.secret_headers.x-team", "x-team is also in headers; give it in one place"),
        ("target.secret_headers.Host", "Host is set by cronledger; remove it"),
        (
            "target.secret_headers.Bad Name",
            "a header name is letters, digits and -_.!#$%&'*+^`|~",
        ),
        ("target.secret_headers.X-Number", "the reference for X-Number must be a string"),
    ]
