"""Redaction (ticdc_lake.redact): a URL's userinfo is masked whatever its password holds, HTTP
Basic/Bearer credentials are masked wherever they appear, and text without credentials is
left as it is."""

from __future__ import annotations

import base64
import re

import pytest
from ticdc_lake.redact import redact_text, redact_url, redact_value

HOST = "registry.example:8081"

# Passwords as people write them into URLs, unencoded: each character here once ended the mask
# early (or kept it from starting), leaving the rest of the password in the text.
PASSWORDS = [
    *["p@ss", "pa ss", "p@ s@ss", "hu@n ter2", "p/ss", "p#ss", "p?ss", "p:ss", "p'ss", "p%40ss"],
    *["x", " "],
]


def _pieces(password: str) -> list[str]:
    """What of a password must not show: each run of letters and digits."""
    return [piece for piece in re.split(r"[^A-Za-z0-9]+", password) if piece]


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize(
    "shape",
    [
        "{url}",
        "schema registry {url} could not be reached",
        "got '{url}'",
        'config {{"url": "{url}"}}',
        "http://other:8081,{url}",
    ],
    ids=["alone", "in-a-sentence", "quoted", "in-json", "in-a-list"],
)
def test_a_url_s_userinfo_is_masked_whatever_the_password_holds(password, shape):
    url = f"https://lake:{password}@{HOST}/schemas/ids/1"
    shown = redact_text(shape.format(url=url))
    assert f"https://lake:***@{HOST}/schemas/ids/1" in shown
    for piece in _pieces(password.replace("%40", "@")):
        assert f"{piece}@" not in shown and f":{piece}" not in shown, shown
    assert redact_url(url) == f"https://lake:***@{HOST}/schemas/ids/1"


def test_userinfo_without_a_password_is_masked_whole_it_may_be_a_token():
    assert redact_url("https://ghp_Abc123@github.example/x") == "https://***@github.example/x"
    assert (
        redact_url("https://bob@corp.example:p w@host:1") == "https://bob@corp.example:***@host:1"
    )


@pytest.mark.parametrize(
    "text",
    [
        "Unauthorized; request had Authorization: Basic {b64}",
        '{{"headers": {{"Authorization": "Basic {b64}"}}}}',
        "authorization=basic {b64}",
        "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJsYWtlIn0.c2lnbmF0dXJl",
        "echo: BEARER abc.def-ghi_jkl~mno+pqr/stu=",
        '{{"auth": "Basic {b64_json}"}}',  # JSON may escape "/" as "\/"
    ],
)
def test_basic_and_bearer_credentials_are_masked_wherever_they_appear(text):
    b64 = base64.b64encode(b"lake:s3cr3t/with?~>").decode()
    text = text.format(b64=b64, b64_json=b64.replace("/", "\\/"))
    shown = redact_text(text)
    assert re.search(r"(?i)(basic|bearer) \*\*\*", shown), shown
    assert b64 not in shown and b64[:8] not in shown and "eyJ" not in shown and "pqr" not in shown


@pytest.mark.parametrize(
    "text",
    [
        "http://127.0.0.1:8081/schemas/ids/7 answered 404",
        "schema registry http://registry:8081 refused bob@corp.example",
        "http://[::1]:8080/x and s3://bucket/key@v1 and file:///tmp/a@b",
        "use basic auth, or a bearer token",
        "mail lake@example.com about http://host/",
        "a bare http:// then bob@corp.example",
    ],
)
def test_text_without_credentials_is_left_as_it_is(text):
    assert redact_text(text) == text


def test_when_a_password_may_run_on_past_a_space_more_is_masked_never_less():
    said = "http://lake:p@registry:8081 refused bob@corp.example"
    assert redact_text(said) == "http://lake:***@corp.example"


def test_known_secrets_are_masked_as_given_and_percent_encoded():
    said = "password 'hunter 2' (hunter%202, hunter+2) refused"
    assert redact_text(said, ["hunter 2", None]) == "password '***' (***, ***) refused"


def test_redact_value_masks_every_string_of_a_json_value_keys_too():
    value = {
        "failures": {"decode": "https://u:p@ss@h/x: Authorization: Basic dXNlcjpwYXNz"},
        "seconds": 1.5,
        "list": ["Bearer Tok3n.value", 7, None],
        "https://u:key@h": True,
    }
    assert redact_value(value) == {
        "failures": {"decode": "https://u:***@h/x: Authorization: Basic ***"},
        "seconds": 1.5,
        "list": ["Bearer ***", 7, None],
        "https://u:***@h": True,
    }
