"""Hostile input: secrets are never printed (issue 64, item 4).

A sweep's database URL may hold a password, in its user part or its query string (libpq reads
`?password=`). petals shows the URL in its lines (the study it opened, a database that fails, a
URL it refuses) and passes it from Make to the stage: the password must appear in none of them.
`make sweep`'s own case (Make's echo) is in test_hostile_make.py.
"""

from __future__ import annotations

import pytest

from pipeline.core.errors import PetalsError
from pipeline.sweep import study
from tests.hostile import record

PASSWORDS = ("hunter2", "hunter3")


def _no_password(text: str) -> None:
    assert not any(p in text for p in PASSWORDS), text


def test_a_refused_storage_url_shows_no_password(tmp_path):
    given = "postgresql://me:hunter2@db-host/petals?password=hunter3&x=1 ; rm -rf ~"
    with pytest.raises(PetalsError) as refused:
        study.storage_url(given, tmp_path, "s")
    line = str(refused.value)
    assert "STORAGE='postgresql://me:***@db-host/petals?password=***" in line and "not a database URL" in line
    _no_password(line)
    record("sweep: a refused STORAGE with passwords", "STORAGE=postgresql://me:PW@host/db?password=PW ; rm",
           line, None, "nothing opened")  # fmt: skip


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://me:hunter2@h/db", "postgresql://me:***@h/db"),
        ("postgresql://me:hun@ter2/x@h:5432/db", "postgresql://me:***@h:5432/db"),  # unescaped @ and /
        ("mysql://me@h/db?ssl_key=/k/hunter2&charset=utf8", "mysql://***@h/db?ssl_key=***&charset=utf8"),
        ("postgresql://me@h/db?sslmode=require&PassWord=hunter3", "postgresql://***@h/db?sslmode=require&PassWord=***"),
        ("sqlite:////tmp/x.db", "sqlite:////tmp/x.db"),
        # a token as the user part (no password), as Git and MLflow servers take one
        ("https://hunter2hunter2@mlflow.example/x", "https://***@mlflow.example/x"),
        # a signed URL's signature, and its credential
        ("https://b.example/o?X-Amz-Credential=hunter2&X-Amz-Signature=hunter3&x=1",
         "https://b.example/o?X-Amz-Credential=***&X-Amz-Signature=***&x=1"),
        ("https://a.example/b?sv=1&sig=hunter3", "https://a.example/b?sv=1&sig=***"),
    ],
)  # fmt: skip
def test_a_storage_url_is_shown_with_every_secret_masked(url, shown):
    assert study.shown_url(url) == shown
    assert study.hidden(f"could not connect to {url}", url) == f"could not connect to {shown}"
    _no_password(study.shown_url(url))


def test_a_drivers_error_quoting_the_password_decoded_is_masked_too():
    """A password written percent-encoded in the URL (`%40` for `@`) reaches the driver decoded,
    and its error may quote it so."""
    url = "postgresql://me:hunter2%40x@h/db"
    said = study.hidden("password authentication failed for me (hunter2@x)", url)
    assert said == "password authentication failed for me (***)"
    assert study.hidden("role me does not exist", "postgresql://me@h/db") == "role me does not exist"


def test_a_failing_database_is_one_line_without_its_password(tmp_path, monkeypatch):
    """Nothing listens on port 1: the driver's error and the study's name are shown, masked."""
    monkeypatch.setattr(study.time, "sleep", lambda seconds: None)  # the retries, without their waits
    url = "postgresql+psycopg2://me:hunter2@127.0.0.1:1/petals?password=hunter3&connect_timeout=2"
    with pytest.raises(PetalsError) as refused:
        study.open_study("s", url, "maximize", 0, "none")
    line = str(refused.value)
    assert "study s in postgresql+psycopg2://me:***@127.0.0.1:1/petals?password=***" in line
    assert "the database fails" in line
    _no_password(line)
    record("sweep: a database that fails, with passwords", "STORAGE=postgresql://me:PW@127.0.0.1:1/db?password=PW",
           line, None, "nothing written")  # fmt: skip


def test_the_postgresql_url_the_docs_give_works_as_written(postgresql, tmp_path):
    """SQLAlchemy 2.1 reads a bare `postgresql://` as psycopg 3, which is not installed: petals gives
    it the driver that is (psycopg2), so `STORAGE=postgresql://user@host/db` opens the study."""
    bare = postgresql.replace("postgresql+psycopg2://", "postgresql://")
    url = study.storage_url(bare, tmp_path, "s")
    assert url == postgresql
    found = study.open_study("docs-url", url, "maximize", 0, "none")
    assert found.study_name == "docs-url"
