"""Bounded fuzzing of both decoders (about 15 s): random bytes and mutations of valid messages of
every version must decode or raise CorruptedDataError, nothing else; whatever decodes re-encodes
to bytes that decode the same."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstate.errors import CorruptedDataError
from kstate.rebalance import AssignmentInfo, FutureSubscriptionInfo, SubscriptionInfo

from .strategies import assignments, subscriptions

FUZZ = settings(deadline=None, suppress_health_check=list(HealthCheck))
INTERESTING_I32 = [-1, 0, 1, 2, 3, 10, 11, 12, 0x7FFFFFFF, -(2**31), 0xFFFF]


def decode_both(data: bytes) -> None:
    try:
        subscription = SubscriptionInfo.decode(data)
        if not isinstance(subscription, FutureSubscriptionInfo):
            assert SubscriptionInfo.decode(subscription.encode()) == subscription
    except CorruptedDataError:
        pass
    try:
        assignment = AssignmentInfo.decode(data)
        assert AssignmentInfo.decode(assignment.encode()) == assignment
    except CorruptedDataError:
        pass


@settings(FUZZ, max_examples=6000)
@given(st.binary(max_size=200))
def test_random_bytes(data):
    decode_both(data)
    # Random bodies behind every plausible header.
    for version in (1, 2, 5, 7, 10, 11, 12):
        decode_both(version.to_bytes(4, "big") + version.to_bytes(4, "big") + data)


@st.composite
def mutated_messages(draw):
    version = draw(st.integers(1, 11))
    message = draw(st.one_of(subscriptions(version), assignments(version)))
    data = bytearray(message.encode())
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["flip", "int", "cut", "insert"]))
        if kind == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "int":
            value = draw(st.sampled_from(INTERESTING_I32)) & 0xFFFFFFFF
            data[at : at + 4] = value.to_bytes(4, "big")
        elif kind == "cut":
            del data[at:]
        else:
            data[at:at] = bytes([draw(st.integers(0, 255))])
    return bytes(data)


@settings(FUZZ, max_examples=2200)
@given(mutated_messages())
def test_mutated_valid_messages(data):
    decode_both(data)
