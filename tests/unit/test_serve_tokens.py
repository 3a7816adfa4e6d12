"""An HTTP claim's token and the checks of the workers' calls (no Redis)."""

from __future__ import annotations

import pytest

from fastq.serve.api.claim_token import ClaimToken, check_claim, progress_report

SECRET = "0123456789abcdef" * 2


def test_a_token_names_its_claim_and_its_worker_id_hides_the_secret() -> None:
    token = ClaimToken("mailer#2", 30_000, "node-1", SECRET)
    assert str(token) == f"mailer#2:30000:node-1:{SECRET}"
    assert ClaimToken.parse(str(token)) == token
    assert token.worker_id.startswith("http:node-1:") and SECRET not in token.worker_id
    # another secret, another worker: a guess holds nothing
    assert ClaimToken("mailer#2", 30_000, "node-1", "f" * 32).worker_id != token.worker_id


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "x",
        f"q:30000:w:{SECRET}:more",
        f"q:30000:w:{SECRET[:-1]}",
        f"q:30000:w:{SECRET.upper()}",
        f"q:999:w:{SECRET}",
        f"q:86400001:w:{SECRET}",
        f"q#0:30000:w:{SECRET}",
        f"q:30000:a b:{SECRET}",
        f"a,b:30000:w:{SECRET}",
    ],
)
def test_what_no_claim_returned_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="token is not one a claim returned"):
        ClaimToken.parse(bad)


def test_a_claims_input_has_defaults_and_bounds() -> None:
    assert check_claim(None, None, None) == (1, 60_000, "anonymous")
    assert check_claim(1000, 1, "w") == (1000, 1000, "w")
    assert check_claim(5, 2.5, "w.1-x_y") == (5, 2500, "w.1-x_y")
    for args, message in [
        ((0, 1, "w"), "max must be within 1..1000, not 0"),
        ((True, 1, "w"), "max must be an integer, not bool"),
        ((1, 86401, "w"), "lease_s must be within 1..86400 seconds, not 86401"),
        ((1, float("nan"), "w"), "lease_s must be within"),
        ((1, "5", "w"), "lease_s must be a number of seconds, not str"),
        ((1, 1, "x" * 65), "worker must be 1 to 64"),
        ((1, 1, 7), "worker must be 1 to 64"),
    ]:
        with pytest.raises(ValueError, match=message.replace(".", r"\.")):
            check_claim(*args)


def test_progress_is_stored_as_set_progress_stores_it() -> None:
    assert progress_report(0.25) == b'{"fraction":0.25,"meta":null}'
    assert progress_report({"fraction": 1, "meta": {"n": 3}}) == b'{"fraction":1.0,"meta":{"n":3}}'
    with pytest.raises(ValueError, match=r"progress: fraction must be a finite number in \[0, 1\]"):
        progress_report(1.5)
    with pytest.raises(ValueError, match="meta is 5002 bytes"):
        progress_report({"fraction": 0, "meta": "x" * 5000})
