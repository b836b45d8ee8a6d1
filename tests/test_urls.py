"""Connection URLs in messages (`executors._urls`): a URL is parsed, its password and secret
query values hidden; one that cannot be parsed shows only its scheme and host."""

from __future__ import annotations

import pytest

from executors._urls import redact, scrub


@pytest.mark.parametrize(("url", "shown"), [
    ("mongodb://alice:s3cret@db:27017/app?tls=true", "mongodb://alice:***@db:27017/app?tls=true"),
    # Unescaped "/" and "@" in a password stay in the password (the user information ends at
    # the last "@" before the query).
    ("postgresql://user:s3c/ret@db/app", "postgresql://user:***@db/app"),
    ("mongodb://user:a@b@host", "mongodb://user:***@host"),
    ("mongodb://user:a:b@h1:1,h2:2/app", "mongodb://user:***@h1:1,h2:2/app"),
    # Query keys that name a secret, in any case, among others left as typed.
    ("postgresql://user@host/db?password=s3cret", "postgresql://user@host/db?password=***"),
    ("postgresql://h/db?sslmode=require&SSLPassword=s3cret&passfile=/home/u/.pgpass",
     "postgresql://h/db?sslmode=require&SSLPassword=***&passfile=***"),
    ("mongodb://h/?Token=s3cret&secret=s3cret&app_secret_key=s3cret&appName=me",
     "mongodb://h/?Token=***&secret=***&app_secret_key=***&appName=me"),
    ("postgresql://u:@[::1]:5432/db", "postgresql://u:***@[::1]:5432/db"),
    ("postgresql://u@/db?host=%2Fvar%2Frun", "postgresql://u@/db?host=%2Fvar%2Frun"),
    ("sqlite:////srv/jobs.db", "sqlite:////srv/jobs.db"),
    ("memory:", "memory:"),
    ("redis://localhost/0", "redis://localhost/0"),
    # An "@" in a query value is not user information.
    ("postgresql://h:5432/db?application_name=me@x", "postgresql://h:5432/db?application_name=me@x"),
])
def test_redact_hides_the_password_and_secret_query_values(url: str, shown: str) -> None:
    """The password of ``user:password@`` (holding "/", "@" or ":" unescaped too) and the
    value of each query key naming a secret are ``***``; the rest is shown as typed."""
    assert redact(url) == shown


@pytest.mark.parametrize(("url", "shown"), [
    # A "?" in a password cuts the URL before its "@": the hosts do not read as hosts.
    ("postgresql://bob:s3c ret?@db/app", "postgresql://db/..."),
    ("postgresql://u:1234?x@host/db", "postgresql://host/..."),
    ("mongodb://user:pa ss word", "mongodb:..."),
    ("not a url at all: s3cret", "<a URL that could not be read>"),
])
def test_a_url_that_cannot_be_parsed_shows_only_its_scheme_and_host(url: str,
                                                                      shown: str) -> None:
    """Never shown as typed: its scheme and host when the host reads as one, else its
    scheme alone."""
    assert redact(url) == shown


def test_scrub_hides_the_secrets_a_driver_quotes_whole_decoded_or_cut() -> None:
    """A driver's message about a URL loses the URL as typed, its password (decoded too) and
    the pieces a driver's parser cut it into."""
    url = "postgresql://u:s3c/ret%21@h/db?password=t0psecret"
    message = (f'bad URL {url}: invalid port "s3c", password "s3c/ret!", '
               'query password "t0psecret"')
    scrubbed = scrub(message, url)
    for secret in ("s3c", "ret", "t0psecret"):
        assert secret not in scrubbed
    assert "postgresql://u:***@h/db?password=***" in scrubbed
