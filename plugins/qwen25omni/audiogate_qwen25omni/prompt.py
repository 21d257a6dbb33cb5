"""Prompt expansion: each clip becomes ``<|audio_bos|>`` + n × ``<|AUDIO|>`` + ``<|audio_eos|>``.

``Qwen2_5OmniProcessor`` replaces each ``<|AUDIO|>`` of the text, in order, by as many
``<|AUDIO|>`` as the clip has encoder rows; the checkpoint's chat template prints every
audio part as ``<|audio_bos|><|AUDIO|><|audio_eos|>`` (with ``Audio k: `` before it only
under ``add_audio_id``, which audiogate does not set). Two inputs reach
:func:`expand_prompt`:

* **Chat** (the segments contain :class:`~audiogate.records.MediaSegment` s). The core
  turns each audio part into a text part holding its sentinel, which the template prints
  verbatim, so each audio segment arrives *bare* and becomes the template's block with its
  n ``<|AUDIO|>``: the text the processor makes of the unflattened message. A segment
  that arrives already *wrapped* (text ending in ``<|audio_bos|>`` before it, text
  starting with ``<|audio_eos|>`` after it) becomes just the n ``<|AUDIO|>``.
* **Plain** (text only). The user writes the template's block,
  ``<|audio_bos|><|AUDIO|><|audio_eos|>``, once per clip in clip order (exactly as many as
  there are clips); each is expanded. Without any block, the blocks of all clips, in
  order, go right after the last ``<|im_start|>user\\n`` (where the template puts audio
  parts that come first in a user turn), or at the start of a prompt with no user turn.

Any other ``<|AUDIO|>``, ``<|audio_bos|>`` or ``<|audio_eos|>`` in the text is refused
(it would reach the model as an audio position with no features behind it), as are
image and video parts (this family's audiogate plugin prepares audio only).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from audiogate.expansion import (
    AudioMarkers,
    assemble,
    block_pieces,
    check_clips,
)
from audiogate.policy import AudioPolicy
from audiogate.records import ClipSlot, ExpandedPrompt, PromptSegment
from audiogate_qwen25omni.geometry import MAX_FRAMES, audio_tokens
from audiogate_qwen25omni.policy import (
    AUDIO_BOS_TOKEN,
    AUDIO_BOS_TOKEN_ID,
    AUDIO_EOS_TOKEN,
    AUDIO_EOS_TOKEN_ID,
    AUDIO_TOKEN,
    AUDIO_TOKEN_INDEX,
)

__all__ = ["CHAT_TEMPLATE", "USER_TURN", "expand_prompt"]

#: Qwen/Qwen2.5-Omni-7B's chat template (``chat_template.jinja``, verbatim).
CHAT_TEMPLATE: Final = (
    "{% set audio_count = namespace(value=0) %}{% set image_count = namespace(value=0) %}"
    "{% set video_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\n"
    "You are a helpful assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_bos|><|IMAGE|><|vision_eos|>"
    "{% elif content['type'] == 'audio' or 'audio' in content or 'audio_url' in content %}"
    "{% set audio_count.value = audio_count.value + 1 %}"
    "{% if add_audio_id %}Audio {{ audio_count.value }}: {% endif %}"
    "<|audio_bos|><|AUDIO|><|audio_eos|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_bos|><|VIDEO|><|vision_eos|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
#: Where a user turn's content starts in the rendered template.
USER_TURN: Final = "<|im_start|>user\n"


#: The checkpoint's audio tokens (its policy's options may name others).
_MARKERS: Final = AudioMarkers(
    audio=AUDIO_TOKEN,
    audio_id=AUDIO_TOKEN_INDEX,
    bos=AUDIO_BOS_TOKEN,
    bos_id=AUDIO_BOS_TOKEN_ID,
    eos=AUDIO_EOS_TOKEN,
    eos_id=AUDIO_EOS_TOKEN_ID,
)


def expand_prompt(
    policy: AudioPolicy,
    segments: Sequence[PromptSegment],
    clips: Sequence[ClipSlot],
    tokenizer: Any,
) -> ExpandedPrompt:
    """Expand a chat-rendered or plain prompt (see the module docstring).

    :returns: the text with every clip's n ``<|AUDIO|>``; with a tokenizer also the ids
        and each clip's span of audio ids (the text tokenizes to exactly those ids).
    :raises PlaceholderError: a missing, extra, reordered or repeated audio position, an
        image or video part, or a raw audio marker.
    :raises PolicyError: the tokenizer's audio token ids differ from the policy's.
    """
    markers = _MARKERS.configured(policy.options, audio_id="audio_token_index")
    check_clips(
        clips,
        audio_tokens=audio_tokens,
        max_frames=MAX_FRAMES,
        pooling="Qwen2.5-Omni's encoder makes {expected} rows of them",
    )
    pieces = block_pieces(segments, clips, markers, family="Qwen2.5-Omni", anchor=USER_TURN)
    return assemble(pieces, clips, markers, tokenizer)
