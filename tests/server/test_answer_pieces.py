"""An answer's fragments regrouped into send pieces: every piece but the last is exactly
``SEND_PIECE_BYTES``, their concatenation is the answer, and a large fragment is sliced
rather than copied."""

from __future__ import annotations

import random

import pytest

from audiogate.server.responses import SEND_PIECE_BYTES, send_pieces

P = SEND_PIECE_BYTES
SIZES = (0, 1, 5, 100, P - 1, P, P + 1, 3 * P + 7)


@pytest.mark.parametrize("seed", range(40))
def test_pieces_are_full_but_the_last_and_concatenate_to_the_answer(seed: int) -> None:
    rng = random.Random(seed)
    fragments = [
        bytes([rng.randrange(256)]) * rng.choice(SIZES) for _ in range(rng.randrange(0, 9))
    ]
    pieces = send_pieces(fragments)
    assert b"".join(bytes(piece) for piece in pieces) == b"".join(fragments)
    assert all(len(piece) == P for piece in pieces[:-1])
    assert len(pieces) == max(1, -(-sum(map(len, fragments)) // P))


def test_small_fragments_share_a_piece_and_a_large_one_is_not_copied() -> None:
    large = bytes(range(256)) * (3 * P // 256)
    pieces = send_pieces([b"{", b'"a":"', large, b'"', b"}"])
    assert len(pieces) == 4
    # The pieces wholly inside the large fragment are views of its memory.
    assert isinstance(pieces[1], memoryview)
    assert pieces[1].obj is large
    assert bytes(pieces[0][:6]) == b'{"a":"'


def test_an_empty_answer_is_one_empty_piece() -> None:
    assert [bytes(piece) for piece in send_pieces([])] == [b""]
    assert [bytes(piece) for piece in send_pieces([b"", b""])] == [b""]
