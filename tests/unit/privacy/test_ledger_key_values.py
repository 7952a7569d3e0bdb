"""The ledger key's pure parts (dp_ops.privacy.ledger_key), pinned exactly: the key id and
the seals are known-answer values (records sealed by an older version must still verify,
and a key id in an old message must still name the same key), the messages name where the
key was looked for, and the key file is created private. No database, no test here is
statistical."""

from __future__ import annotations

import hashlib
import hmac
import stat
from pathlib import Path

import pytest

from dp_ops.errors import LedgerKeyMissing
from dp_ops.privacy import ledger_key

KEY = bytes(range(32))


def test_the_key_id_is_a_known_answer() -> None:
    # HMAC-SHA256(KEY, b"dp-ops ledger key id"), first 16 hex digits
    assert ledger_key.key_id(KEY) == "10b243ee48c854d8"


def test_a_seal_is_the_mac_of_the_canonical_record() -> None:
    # the record with its kind, keys sorted, no spaces: {"a":2,"b":1,"kind":"head"}
    tag = "13b286a5a86fc47d7bbed8c189a195fe27f2bba3a14ab32661edb10701fa4e91"
    assert ledger_key.seal(KEY, "head", {"b": 1, "a": 2}) == tag
    assert ledger_key.mac(KEY, '{"a":2,"b":1,"kind":"head"}') == tag
    assert ledger_key.sealed(KEY, "head", {"a": 2, "b": 1}, tag)


@pytest.mark.parametrize("kind, body, tag", [
    ("identity", {"a": 2, "b": 1}, None),          # another kind
    ("head", {"a": 2, "b": 2}, None),              # another body
    ("head", {"a": 2, "b": 1}, "0" * 64),          # another tag
    ("head", {"a": 2, "b": 1}, 13),                # not a string
])
def test_anything_else_is_not_sealed(kind: str, body: dict[str, int],
                                     tag: object) -> None:
    good = ledger_key.seal(KEY, "head", {"a": 2, "b": 1})
    assert not ledger_key.sealed(KEY, kind, body, good if tag is None else tag)


def test_a_key_shorter_than_32_bytes_is_refused_with_its_length() -> None:
    with pytest.raises(LedgerKeyMissing) as err:
        ledger_key.parse_key("ab" * 31, source="SRC")
    assert str(err.value) == ("SRC: the ledger key has 31 bytes; at least 32 (64 hex digits) "
                              "are needed")
    assert ledger_key.parse_key("  " + "ab" * 32 + "\n", source="SRC") == b"\xab" * 32


def test_a_key_that_is_not_hex_is_refused_naming_the_digits_needed() -> None:
    with pytest.raises(LedgerKeyMissing) as err:
        ledger_key.parse_key("not hex", source="SRC")
    assert str(err.value) == "SRC: the ledger key must be hex digits (at least 64)"


def test_a_short_key_from_the_host_is_refused_with_its_length() -> None:
    ledger_key.use_provider(lambda: b"k" * 31)
    try:
        with pytest.raises(LedgerKeyMissing) as err:
            ledger_key.load_key(environ={})
    finally:
        ledger_key.use_provider(None)
    assert str(err.value) == "the host's ledger key has 31 bytes; at least 32 are needed"


def test_the_environment_passed_in_is_the_one_read(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ledger_key.KEY_ENV, "cd" * 32)
    monkeypatch.setenv(ledger_key.KEY_FILE_ENV, str(tmp_path / "process.key"))
    named = tmp_path / "named.key"
    named.write_text("ef" * 32 + "\n")
    assert ledger_key.load_key(environ={ledger_key.KEY_FILE_ENV: str(named)}) == b"\xef" * 32
    assert ledger_key.load_key() == b"\xcd" * 32


def test_a_malformed_key_file_is_named(tmp_path: Path) -> None:
    named = tmp_path / "named.key"
    named.write_text("ab" * 8)
    with pytest.raises(LedgerKeyMissing) as err:
        ledger_key.load_key(environ={ledger_key.KEY_FILE_ENV: str(named)})
    assert str(err.value).startswith(f"{named}: the ledger key has 8 bytes")


def test_no_key_names_both_places_and_the_runbook(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(LedgerKeyMissing) as err:
        ledger_key.load_key(environ={})
    path = tmp_path / ".config" / "dp-ops" / "ledger.key"
    assert str(err.value) == (
        f"no ledger key: neither DP_LEDGER_KEY nor the key file {path} (DP_LEDGER_KEY_FILE) "
        "is there. The ledger's chain is sealed with the key it was created with: point the "
        "process at that key (OPERATIONS.md, 'The ledger key')")


def test_the_default_key_file_is_under_the_users_config(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert ledger_key.default_key_file() == tmp_path / ".config" / "dp-ops" / "ledger.key"
    assert ledger_key.key_file({}) == ledger_key.default_key_file()
    assert ledger_key.key_file({ledger_key.KEY_FILE_ENV: "~/k"}) == tmp_path / "k"


def test_a_created_key_file_and_its_folders_are_private(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "ledger.key"
    key = ledger_key.load_key(create=True, environ={ledger_key.KEY_FILE_ENV: str(path)})
    assert len(key) == 32 and path.read_text() == key.hex() + "\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert list(path.parent.iterdir()) == [path]  # the temporary file is gone
    # a second call reads it back, never makes another
    assert ledger_key.load_key(create=True, environ={ledger_key.KEY_FILE_ENV: str(path)}) == key


def test_a_key_file_another_process_won_with_is_read_and_named(tmp_path: Path) -> None:
    path = tmp_path / "ledger.key"
    path.write_text("zz")  # the winner of the race wrote something malformed
    with pytest.raises(LedgerKeyMissing) as err:
        ledger_key._create_key_file(path)
    assert str(err.value).startswith(f"{path}: the ledger key must be hex digits")
    good = "ab" * 32
    path.write_text(good)
    assert ledger_key._create_key_file(path) == bytes.fromhex(good)


def test_mac_is_hmac_sha256_in_hex() -> None:
    assert ledger_key.mac(KEY, "x") == hmac.new(KEY, b"x", hashlib.sha256).hexdigest()
