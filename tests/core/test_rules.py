"""Send requests are validated against the packet limits before anything is written."""

import pytest
from hongbao.core.errors import InvalidAmount, InvalidCount, InvalidRequest
from hongbao.core.packet import Kind, PacketSpec
from hongbao.core.rules import Limits, valid_user_id, validate_send

LIMITS = Limits()


def test_lucky_packet_in_fen() -> None:
    """A lucky group packet keeps its total, count, group and greeting."""
    spec = validate_send(
        {"kind": "lucky", "count": 10, "total_fen": 1000, "group_id": "g1", "greeting": "恭喜发财"}, "u1", LIMITS
    )
    assert spec == PacketSpec(Kind.LUCKY, 10, 1000, "g1", None, "恭喜发财")


def test_yuan_total_is_exact() -> None:
    """M-01: total_yuan "0.30" becomes 30 fen."""
    assert validate_send({"count": 3, "total_yuan": "0.30", "group_id": "g"}, "u1", LIMITS).total_fen == 30


def test_equal_packet_total_is_per_share_times_count() -> None:
    """M-02/M-07: an equal packet's total is per-share x count, so nothing is left to round."""
    spec = validate_send({"kind": "equal", "count": 18, "per_share_fen": 5, "group_id": "g"}, "u1", LIMITS)
    assert (spec.kind, spec.count, spec.total_fen) == (Kind.EQUAL, 18, 90)


def test_equal_packet_with_a_remainder_is_refused() -> None:
    """M-02: T=100 over N=18 as an equal packet is refused rather than rounded."""
    with pytest.raises(InvalidAmount, match="does not divide"):
        validate_send({"kind": "equal", "count": 18, "total_fen": 100, "group_id": "g"}, "u1", LIMITS)


def test_total_below_count_is_refused() -> None:
    """M-04: T=10, N=15 is a validation error (invalid_count)."""
    with pytest.raises(InvalidCount) as info:
        validate_send({"count": 15, "total_fen": 10, "group_id": "g"}, "u1", LIMITS)
    assert info.value.code == "invalid_count"


def test_exclusive_packet() -> None:
    """M-25: an exclusive packet has count 1 and a receiver, never a group."""
    spec = validate_send({"kind": "exclusive", "total_fen": 500, "receiver_id": "B"}, "A", LIMITS)
    assert spec == PacketSpec(Kind.EXCLUSIVE, 1, 500, None, "B", "")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({}, "an exclusive packet needs a receiver_id and no group_id"),
        ({"receiver_id": "B", "group_id": "g"}, "an exclusive packet needs a receiver_id and no group_id"),
        ({"receiver_id": "b ob"}, "receiver_id must be a user id: 1..64 of [A-Za-z0-9_-]"),
        ({"receiver_id": 7}, "receiver_id must be a user id: 1..64 of [A-Za-z0-9_-]"),
    ],
)
def test_exclusive_packet_errors_name_what_is_wrong(extra: dict[str, object], message: str) -> None:
    """A missing receiver (or a group) and an invalid receiver id get messages of their own."""
    with pytest.raises(InvalidRequest) as err:
        validate_send({"kind": "exclusive", "total_fen": 500, **extra}, "A", LIMITS)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"count": 0, "total_fen": 10, "group_id": "g"}, InvalidCount),
        ({"count": 101, "total_fen": 1000, "group_id": "g"}, InvalidCount),
        ({"count": 1.0, "total_fen": 10, "group_id": "g"}, InvalidCount),
        ({"count": True, "total_fen": 10, "group_id": "g"}, InvalidCount),
        ({"count": 1, "total_fen": 20001, "group_id": "g"}, InvalidAmount),
        ({"count": 1, "total_fen": 10.5, "group_id": "g"}, InvalidAmount),
        ({"count": 1, "total_fen": "10", "group_id": "g"}, InvalidAmount),
        ({"count": 1, "total_fen": -5, "group_id": "g"}, InvalidAmount),
        ({"count": 1, "total_fen": 0, "group_id": "g"}, InvalidAmount),
        ({"count": 1, "total_yuan": "1.001", "group_id": "g"}, InvalidAmount),
        ({"count": 1, "group_id": "g"}, InvalidAmount),
        ({"count": 1, "total_fen": 10, "total_yuan": "0.10", "group_id": "g"}, InvalidRequest),
        ({"count": 1, "total_fen": 10}, InvalidRequest),
        ({"count": 1, "total_fen": 10, "group_id": "g", "receiver_id": "b"}, InvalidRequest),
        ({"count": 1, "total_fen": 10, "group_id": "g", "greeting": "x" * 65}, InvalidRequest),
        ({"count": 1, "total_fen": 10, "group_id": "g" * 256}, InvalidRequest),
        ({"kind": "weird", "count": 1, "total_fen": 10, "group_id": "g"}, InvalidRequest),
        ({"kind": "exclusive", "count": 2, "total_fen": 10, "receiver_id": "b"}, InvalidCount),
        ({"kind": "exclusive", "total_fen": 10, "receiver_id": "u1"}, InvalidRequest),
        ({"kind": "exclusive", "total_fen": 10, "receiver_id": "b c"}, InvalidRequest),
        ({"kind": "lucky", "count": 2, "per_share_fen": 10, "group_id": "g"}, InvalidRequest),
    ],
)
def test_bad_send_requests(body: dict[str, object], error: type[Exception]) -> None:
    """Each malformed send request raises its documented error, with a 400 status."""
    with pytest.raises(error) as info:
        validate_send(body, "u1", LIMITS)
    assert info.value.status == 400  # type: ignore[attr-defined]


def test_a_group_id_too_long_for_any_group_is_refused_without_an_echo() -> None:
    """A group_id of GROUP_ID_MAX characters is taken; one longer is a 400 that does not repeat it."""
    assert validate_send({"count": 1, "total_fen": 10, "group_id": "g" * 255}, "u1", LIMITS).group_id == "g" * 255
    with pytest.raises(InvalidRequest) as info:
        validate_send({"count": 1, "total_fen": 10, "group_id": "g" * 60_000}, "u1", LIMITS)
    assert str(info.value) == "group_id must be at most 255 characters"


def test_greeting_limit_counts_characters() -> None:
    """64 Chinese characters fit the greeting limit; it counts characters, not bytes."""
    assert (
        validate_send({"count": 1, "total_fen": 1, "group_id": "g", "greeting": "福" * 64}, "u", LIMITS).greeting
        == "福" * 64
    )


@pytest.mark.parametrize(
    ("uid", "ok"),
    [
        ("u1", True),
        ("A-b_9", True),
        ("x" * 64, True),
        ("x" * 65, False),
        ("", False),
        ("a b", False),
        ("é", False),
        (7, False),
    ],
)
def test_user_ids(uid: object, ok: bool) -> None:
    """User ids are 1..64 characters of [A-Za-z0-9_-]."""
    assert valid_user_id(uid) is ok
