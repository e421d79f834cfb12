"""Through the API: a channel whose target reaches beyond what the operator allows is a 400 at
the field that does, with the message that says which setting would allow it, whatever the
spelling (generated: private and metadata addresses written as decimal, hex, octal, shortened
and IPv4-mapped forms); and nothing is stored."""

from __future__ import annotations

import ipaddress
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from cronledger.api import create_app
from cronledger.ledger import Ledger
from tests.api.helpers import CHANNELS, SETTINGS, Api, channel_document
from tests.api.http import call
from tests.profiles import examples

BLOCKED = {
    "127.0.0.0/8": "a loopback address",
    "10.0.0.0/8": "a private address",
    "172.16.0.0/12": "a private address",
    "192.168.0.0/16": "a private address",
    "169.254.0.0/16": "a link-local (instance metadata lives there) address",
    "100.64.0.0/10": "a CGNAT (shared address space) address",
    "224.0.0.0/4": "a multicast address",
}


def spellings(address: ipaddress.IPv4Address) -> st.SearchStrategy[str]:
    """The ways a URL host can name `address` that a resolver reads as it."""
    value = int(address)
    octets = address.packed
    return st.sampled_from(
        [
            str(address),
            str(value),  # 2852039166
            hex(value),  # 0xa9fea9fe
            ".".join(hex(o) for o in octets),  # 0xa9.0xfe.0xa9.0xfe
            ".".join(f"0{o:o}" for o in octets),  # 0251.0376.0251.0376
            f"{octets[0]}.{octets[1]}.{value & 0xFFFF}",  # 169.254.43518
            f"{octets[0]}.{value & 0xFFFFFF}",  # 169.16689662
            f"[::ffff:{address}]",
            f"[::ffff:{octets[0] << 8 | octets[1]:x}:{octets[2] << 8 | octets[3]:x}]",
            f"[64:ff9b::{address}]",
        ]
    )


@st.composite
def blocked_hosts(draw: st.DrawFn) -> tuple[str, str]:
    network = ipaddress.ip_network(draw(st.sampled_from(sorted(BLOCKED))))
    offset = draw(st.integers(min_value=0, max_value=network.num_addresses - 1))
    address = ipaddress.IPv4Address(int(network.network_address) + offset)
    return draw(spellings(address)), BLOCKED[str(network)]


@given(host_and_kind=blocked_hosts(), port=st.sampled_from(["", ":80", ":8080", ":5432"]))
@settings(max_examples=examples(150), deadline=None, suppress_health_check=list(HealthCheck))
def test_a_non_public_address_in_any_spelling_is_a_400_at_target_url(
    sqlite_ledger: Ledger, host_and_kind: tuple[str, str], port: str
) -> None:
    host, kind = host_and_kind
    app = create_app(sqlite_ledger)
    target = {"type": "http", "url": f"http://{host}{port}/latest/meta-data/"}

    answer = call(app, "POST", CHANNELS, body=channel_document(target=target))

    assert answer.status == 400
    (detail,) = answer.body["error"]["details"]
    assert (detail["path"], detail["code"]) == ("target.url", "invalid")
    assert f" is {kind}; http targets reach only public addresses unless " in detail["message"]
    assert detail["message"].endswith("CRONLEDGER_HTTP_ALLOW_NETWORKS lists the network")
    assert sqlite_ledger.channels.list_channels().total == 0


@given(
    address=st.integers(min_value=0, max_value=2**32 - 1)
    .map(ipaddress.IPv4Address)
    .filter(lambda a: a.is_global and not a.is_multicast)
    .flatmap(spellings)
)
@settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck))
def test_a_public_address_in_any_spelling_is_accepted(sqlite_ledger: Ledger, address: str) -> None:
    app = create_app(sqlite_ledger)
    name = f"public-{uuid.uuid4().hex}"
    target = {"type": "http", "url": f"https://{address}/hook"}

    answer = call(app, "POST", CHANNELS, body=channel_document(name, target=target))

    assert answer.status == 201, answer.body


@pytest.mark.parametrize(
    ("target", "path", "message"),
    [
        (
            {"type": "python", "callable": "subprocess:getoutput"},
            "target.callable",
            "subprocess is not in CRONLEDGER_PYTHON_TARGETS (allowed: none); the operator lists "
            "the modules whose functions python targets may call",
        ),
        (
            {"type": "python", "callable": "cronledger.demo:hello"},
            "target.callable",
            "cronledger.demo is not in CRONLEDGER_PYTHON_TARGETS (allowed: none); the operator "
            "lists the modules whose functions python targets may call",
        ),
        (
            {"type": "http", "url": "http://[fd00:ec2::254]/latest/"},
            "target.url",
            "fd00:ec2::254 is a unique-local (instance metadata lives there) address; http "
            "targets reach only public addresses unless CRONLEDGER_HTTP_ALLOW_NETWORKS lists "
            "the network",
        ),
        (
            {"type": "http", "url": "http://localhost:5432/"},
            "target.url",
            "localhost (127.0.0.1) is a loopback address; http targets reach only public "
            "addresses unless CRONLEDGER_HTTP_ALLOW_NETWORKS lists the network",
        ),
        (
            {"type": "http", "url": "https://example.com/a\r\nb"},
            "target.url",
            "url must not contain spaces or control characters",
        ),
        (
            {"type": "http", "url": "https://example.com/?access_key=abc"},
            "target.url",
            "query parameter 'access_key' looks like a credential; target settings are stored "
            "in plain text, so send it as a secret_headers header instead",
        ),
        (
            {"type": "http", "url": "https://example.com/", "headers": {"X-Passphrase": "x"}},
            "target.headers.X-Passphrase",
            "header X-Passphrase looks like a credential; target settings are stored in plain "
            "text, so give it as a secret_headers reference (e.g. "
            "'env:CRONLEDGER_SECRET_HOOK_TOKEN')",
        ),
        (
            {
                "type": "http",
                "url": "https://example.com/",
                "secret_headers": {"Authorization": "env:AWS_SECRET_ACCESS_KEY"},
            },
            "target.secret_headers.Authorization",
            "a secret reference is env:CRONLEDGER_SECRET_<NAME>, a variable of the scheduler's "
            "environment set aside for targets (CRONLEDGER_SECRETS=env), e.g. "
            "'env:CRONLEDGER_SECRET_HOOK_TOKEN'",
        ),
    ],
)
def test_each_refusal_is_a_400_with_its_path_and_message_and_nothing_is_stored(
    ledger: Ledger, target: dict[str, Any], path: str, message: str
) -> None:
    app = create_app(ledger)  # the default settings: the operator allowed nothing

    answer = call(app, "POST", CHANNELS, body=channel_document(target=target))

    assert answer.status == 400
    assert answer.body["error"]["code"] == "validation_failed"
    assert answer.body["error"]["details"] == [
        {"path": path, "code": "invalid", "message": message}
    ]
    assert ledger.channels.list_channels().total == 0


def test_activating_a_channel_whose_target_the_operator_no_longer_allows_is_a_400(
    ledger: Ledger,
) -> None:
    # Given a draft channel saved while its module was allowed
    created = call(create_app(ledger, SETTINGS), "POST", CHANNELS, body=channel_document())
    channel_id = created.data["channel_id"]

    # When the operator no longer allows it, and someone activates the channel
    answer = call(
        create_app(ledger), "PATCH", f"{CHANNELS}/{channel_id}/status", body={"status": "active"}
    )

    # Then it stays a draft, and the answer says why
    assert answer.status == 400
    assert answer.body["error"]["details"][0]["path"] == "target.callable"
    assert "CRONLEDGER_PYTHON_TARGETS" in answer.body["error"]["details"][0]["message"]
    assert ledger.channels.get_channel(channel_id).status == "draft"


def test_activating_an_archived_channel_is_a_409_even_when_its_target_is_no_longer_allowed(
    ledger: Ledger,
) -> None:
    # Given an archived channel whose module the operator has since stopped allowing
    created = call(create_app(ledger, SETTINGS), "POST", CHANNELS, body=channel_document())
    channel_id = created.data["channel_id"]
    ledger.channels.set_channel_status(channel_id, "archived")

    # When someone activates it
    answer = call(
        create_app(ledger), "PATCH", f"{CHANNELS}/{channel_id}/status", body={"status": "active"}
    )

    # Then the answer is that archived is final (a 400 about the target would invite a fix,
    # and an archived channel cannot be edited)
    assert answer.status == 409, answer.body
    assert "archived" in answer.body["error"]["message"]
    assert ledger.channels.get_channel(channel_id).status == "archived"


@pytest.mark.parametrize(
    "url",
    [
        "https://[::1/hook",
        "https://[example.com]/hook",
        "http://[127.0.0.1]/",
        "https://example.com:0/",
    ],
)
def test_a_url_python_cannot_split_is_a_400_at_target_url(api: Api, url: str) -> None:
    # urlsplit raises ValueError for an unclosed or non-address bracketed host; port 0 is
    # no port a connection can be made to.
    answer = api("POST", CHANNELS, body=channel_document(target={"type": "http", "url": url}))

    assert answer.status == 400, answer.body
    assert [d["path"] for d in answer.error["details"]] == ["target.url"]
    assert api("GET", CHANNELS).body["total"] == 0
