"""Test support for audiogate and its family plugins; also the ``pytest11`` plugin ``audiogate``.

* :mod:`audiogate.testing.plugin`: the fixtures (``audiogate_host``, ``family_host``,
  ``encoded_clip``, ``cancel_at``), loaded by pytest through the entry point;
* :mod:`audiogate.testing.contract`: :class:`~audiogate.testing.contract.FamilyContract`,
  the suite every family runs;
* :mod:`audiogate.testing.audio`: generated signals and WAV clips;
* :mod:`audiogate.testing.tokenizers`: stand-in tokenizers with a family's real special ids;
* :mod:`audiogate.testing.cancel`: tokens that cancel on the n-th poll of a checkpoint;
* :mod:`audiogate.testing.checkpoints`: config documents restating a family's pinned keys;
* :mod:`audiogate.testing.memory`: the traced peak of a stage on a fresh thread;
* :mod:`audiogate.testing.streaming`: chunkings, and a family's feature stream checked
  against the whole clip.

Nothing here is imported by ``import audiogate``; ``contract`` and ``plugin`` need pytest.
"""

from __future__ import annotations

__all__: list[str] = []
