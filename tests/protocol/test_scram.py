"""SCRAM-SHA-256 client: the RFC 7677 vector, SASLprep, and every refusal of a bad server."""

from __future__ import annotations

import base64

import pytest

from pgmux.errors import InterfaceError, OperationalError
from pgmux.protocol.scram import (
    DEFAULT_MAX_ITERATIONS,
    MECHANISM,
    MECHANISM_PLUS,
    ScramClient,
    new_nonce,
    saslprep,
)

# RFC 7677 section 3, verbatim.
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="

NONCE = "rOprNGfwEbeRWgbNEkqO"
SALT_B64 = "W22ZaJ0SNY7soEsUEjb6gQ=="


def rfc_client(**overrides) -> ScramClient:
    options = {"username": "user", "nonce": NONCE} | overrides
    return ScramClient("pencil", **options)


def started(**overrides) -> ScramClient:
    client = rfc_client(**overrides)
    client.client_first()
    return client


def server_first(nonce=NONCE + "srv", salt=SALT_B64, iterations="4096") -> bytes:
    return f"r={nonce},s={salt},i={iterations}".encode()


# -- RFC 7677 ------------------------------------------------------------------------------


def test_rfc7677_client_first():
    assert rfc_client().client_first() == RFC_CLIENT_FIRST


def test_rfc7677_client_final_matches_exactly():
    client = started()
    assert client.client_final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL


def test_rfc7677_server_final_accepted():
    client = started()
    client.client_final(RFC_SERVER_FIRST)
    assert not client.finished
    client.verify_server_final(RFC_SERVER_FINAL)
    assert client.finished


def test_rfc7677_wrong_server_signature_rejected():
    client = started()
    client.client_final(RFC_SERVER_FIRST)
    signature = bytearray(base64.b64decode(RFC_SERVER_FINAL[2:]))
    signature[0] ^= 1
    with pytest.raises(OperationalError, match="signature does not match"):
        client.verify_server_final(b"v=" + base64.b64encode(bytes(signature)))
    assert not client.finished


def test_rfc7677_wrong_password_changes_the_proof():
    client = ScramClient("pencil2", username="user", nonce=NONCE)
    client.client_first()
    assert client.client_final(RFC_SERVER_FIRST) != RFC_CLIENT_FINAL


# -- messages and flags --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "data", "header", "mechanism"),
    [
        ("n", b"", b"n,,", MECHANISM),
        ("y", b"", b"y,,", MECHANISM),
        ("p", b"\x01\x02", b"p=tls-server-end-point,,", MECHANISM_PLUS),
    ],
)
def test_gs2_header_and_channel_binding_attribute(flag, data, header, mechanism):
    client = rfc_client(cbind_flag=flag, cbind_data=data)
    assert client.mechanism == mechanism
    assert client.client_first() == header + b"n=user,r=" + NONCE.encode()
    final = client.client_final(server_first())
    assert final.startswith(b"c=" + base64.b64encode(header + data) + b",r=")


def test_username_is_escaped_as_saslname():
    client = ScramClient("pw", username="a=b,c", nonce="abc")
    assert client.client_first() == b"n,,n=a=3Db=2Cc,r=abc"


def test_default_username_is_empty_like_libpq():
    assert ScramClient("pw", nonce="abc").client_first() == b"n,,n=,r=abc"


def test_random_nonces_are_printable_and_distinct():
    first, second = new_nonce(), new_nonce()
    assert first != second
    assert len(first) == 24 and "," not in first and first.isprintable()
    a = ScramClient("pw").client_first()
    b = ScramClient("pw").client_first()
    assert a != b and a.startswith(b"n,,n=,r=")


@pytest.mark.parametrize(
    "options",
    [
        {"nonce": "has,comma"},
        {"nonce": ""},
        {"nonce": "sp ace"},
        {"cbind_flag": "x"},
        {"cbind_flag": "p"},  # p without data
        {"cbind_flag": "n", "cbind_data": b"x"},
    ],
)
def test_bad_construction_is_interface_error(options):
    with pytest.raises(InterfaceError):
        ScramClient("pw", **options)


def test_calls_out_of_order_are_interface_errors():
    client = rfc_client()
    with pytest.raises(InterfaceError):
        client.client_final(RFC_SERVER_FIRST)
    with pytest.raises(InterfaceError):
        client.verify_server_final(RFC_SERVER_FINAL)
    client.client_first()
    with pytest.raises(InterfaceError):
        client.client_first()
    client.client_final(RFC_SERVER_FIRST)
    with pytest.raises(InterfaceError):
        client.client_final(RFC_SERVER_FIRST)
    client.verify_server_final(RFC_SERVER_FINAL)
    with pytest.raises(InterfaceError):
        client.verify_server_final(RFC_SERVER_FINAL)


def test_default_iteration_cap():
    assert DEFAULT_MAX_ITERATIONS == 1_000_000


# -- refusals of the server-first-message --------------------------------------------------


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (server_first(nonce="someone-elses-nonce"), "does not extend"),
        (server_first(nonce=NONCE), "does not extend"),  # no server part
        (server_first(nonce="rOprNGfw"), "does not extend"),  # a prefix of ours
        (server_first(nonce=NONCE + "a b"), "printable"),
        (server_first(iterations="0"), "below 1"),
        (server_first(iterations="-4096"), "below 1"),
        (server_first(iterations="1000001"), "exceeds the cap"),
        (server_first(iterations="99999999999999999999"), "not a number"),
        (server_first(iterations="4k"), "not a number"),
        (server_first(iterations=""), "not a number"),
        (server_first(salt="not base64!"), "not valid base64"),
        (server_first(salt="W22ZaJ0SNY7soEsUEjb6gQ="), "not valid base64"),  # bad padding
        (server_first(salt=""), "empty salt"),
        (b"m=ext," + server_first(), "mandatory extension"),
        (b"s=" + SALT_B64.encode() + b",r=" + NONCE.encode() + b"x,i=4096", "must start with"),
        (b"r=" + NONCE.encode() + b"x,i=4096", "must start with"),
        (b"", "malformed"),
        (b"garbage", "malformed"),
        (b"r=" + NONCE.encode() + b"x,,s=abc,i=1", "malformed"),
        (b"\xff\xfe", "not valid UTF-8"),
    ],
)
def test_server_first_refusals(message, reason):
    client = started()
    with pytest.raises(OperationalError, match=reason):
        client.client_final(message)


def test_iteration_cap_is_configurable():
    client = started(max_iterations=4095)
    with pytest.raises(OperationalError, match="exceeds the cap of 4095"):
        client.client_final(RFC_SERVER_FIRST)
    client = started(max_iterations=4096)
    assert client.client_final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL


def test_server_first_extensions_after_the_iteration_count_are_ignored():
    # RFC 5802: extensions may follow; our proof covers the whole message as received.
    client = started()
    final = client.client_final(RFC_SERVER_FIRST + b",x=future")
    assert final.startswith(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDp")
    assert final != RFC_CLIENT_FINAL  # the AuthMessage includes the extension


# -- refusals of the server-final-message --------------------------------------------------


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (b"e=invalid-proof", "reported error 'invalid-proof'"),
        (b"x=something", "neither a verifier nor an error"),
        (b"v=!!!", "not valid base64"),
        (b"v=", "signature does not match"),
        (b"", "malformed"),
        (RFC_SERVER_FINAL[:-4] + b"AAA=", "signature does not match"),
    ],
)
def test_server_final_refusals(message, reason):
    client = started()
    client.client_final(RFC_SERVER_FIRST)
    with pytest.raises(OperationalError, match=reason):
        client.verify_server_final(message)
    assert not client.finished


# -- SASLprep (RFC 4013, as PostgreSQL applies it) -----------------------------------------


@pytest.mark.parametrize(
    ("password", "prepared"),
    [
        ("pencil", b"pencil"),
        ("with\x07bell", b"with\x07bell"),  # pure ASCII passes unchanged, as in PostgreSQL
        ("I\u00adX", b"IX"),  # RFC 4013 example: soft hyphen maps to nothing
        ("\u00aa", b"a"),  # RFC 4013 example: NFKC
        ("\u2168", b"IX"),  # RFC 4013 example: ROMAN NUMERAL NINE
        ("a\u00a0b", b"a b"),  # non-ASCII space maps to SPACE
        ("caf\u0065\u0301", "caf\u00e9".encode()),  # composed by NFKC
        ("\u0627\u0644\u0633\u0644\u0627\u0645", "\u0627\u0644\u0633\u0644\u0627\u0645".encode()),
    ],
)
def test_saslprep_normalises(password, prepared):
    assert saslprep(password) == prepared


@pytest.mark.parametrize(
    "password",
    [
        "\u00e9\u0007",  # non-ASCII with an ASCII control character (C.2.1)
        "\u00e9\ue000",  # private use (C.3)
        "\u00e9\u0221",  # unassigned in Unicode 3.2 (A.1)
        "\u0627\u0031",  # RandALCat first but not last
        "\u0627a\u0627",  # RandALCat mixed with LCat
        "\u00ad",  # maps to nothing at all: PostgreSQL refuses an empty result
    ],
)
def test_saslprep_falls_back_to_raw_utf8(password):
    assert saslprep(password) == password.encode()


def test_saslprep_is_applied_to_the_proof():
    # A password SASLprep maps must give the same proof as its prepared form.
    spaced = ScramClient("pen\u00a0cil", username="user", nonce=NONCE)
    plain = ScramClient("pen cil", username="user", nonce=NONCE)
    spaced.client_first()
    plain.client_first()
    assert spaced.client_final(RFC_SERVER_FIRST) == plain.client_final(RFC_SERVER_FIRST)


def test_unencodable_password_does_not_leak():
    with pytest.raises(InterfaceError) as info:
        saslprep("secret\ud800")
    exc = info.value
    assert "secret" not in repr(exc.args)
    assert exc.__cause__ is None and exc.__context__ is None  # the UnicodeEncodeError is gone


def test_repr_hides_the_password():
    client = ScramClient("pencil-sharpener", nonce=NONCE)
    assert "pencil" not in repr(client)
