"""Prompt expansion: each clip → ``<|audio_start|>``, n × ``<|audio_pad|>``, ``<|audio_end|>``.

``Qwen3OmniMoeProcessor`` replaces each ``<|audio_pad|>`` of the text, in order, by as
many ``<|audio_pad|>`` as the clip has encoder rows; the checkpoint's chat template prints
every audio part as ``<|audio_start|><|audio_pad|><|audio_end|>``. Two inputs reach
:func:`expand_prompt`:

* **Chat** (the segments contain :class:`~audiogate.records.MediaSegment` s). The core
  turns each audio part into a text part holding its sentinel, which the template prints
  verbatim, so each audio segment arrives *bare* and becomes the template's block with its
  n ``<|audio_pad|>``: the text the processor makes of the unflattened message. A segment
  that arrives already *wrapped* (text ending in ``<|audio_start|>`` before it, text
  starting with ``<|audio_end|>`` after it) becomes just the n ``<|audio_pad|>``.
* **Plain** (text only). The user writes the template's block,
  ``<|audio_start|><|audio_pad|><|audio_end|>``, once per clip in clip order (exactly as
  many as there are clips); each is expanded. Without any block, the blocks of all clips,
  in order, go right after the last ``<|im_start|>user\\n`` (where the template puts audio
  parts that come first in a user turn), or at the start of a prompt with no user turn.

Any other ``<|audio_pad|>``, ``<|audio_start|>`` or ``<|audio_end|>`` in the text is
refused (it would reach the model as an audio position with no features behind it), as
are image and video parts (this family's audiogate plugin prepares audio only).
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
from audiogate_qwen3omni.geometry import MAX_FRAMES, audio_tokens
from audiogate_qwen3omni.policy import (
    AUDIO_BOS_TOKEN,
    AUDIO_BOS_TOKEN_ID,
    AUDIO_EOS_TOKEN,
    AUDIO_EOS_TOKEN_ID,
    AUDIO_TOKEN,
    AUDIO_TOKEN_INDEX,
)

__all__ = ["CHAT_TEMPLATE", "USER_TURN", "expand_prompt"]

#: Qwen/Qwen3-Omni-30B-A3B-Instruct's chat template as far as it renders system, user and
#: assistant turns of text and media parts (reconstructed: no stored copy of the
#: checkpoint's ``chat_template.json`` was found; its tool-call and reasoning branches are
#: not reproduced, see docs/provenance.md). No default system turn; each content part in
#: order: text verbatim, audio ``<|audio_start|><|audio_pad|><|audio_end|>``, image and
#: video between ``<|vision_start|>`` and ``<|vision_end|>``.
CHAT_TEMPLATE: Final = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for content in message['content'] %}"
    "{%- if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif content['type'] == 'audio' or 'audio' in content or 'audio_url' in content %}"
    "{{- '<|audio_start|><|audio_pad|><|audio_end|>' }}"
    "{%- elif content['type'] == 'video' or 'video' in content %}"
    "{{- '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{%- elif 'text' in content %}{{- content['text'] }}"
    "{%- endif %}{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
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

    :returns: the text with every clip's n ``<|audio_pad|>``; with a tokenizer also the ids
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
        pooling="Qwen3-Omni's audio encoder makes {expected} rows of them",
    )
    pieces = block_pieces(segments, clips, markers, family="Qwen3-Omni", anchor=USER_TURN)
    return assemble(pieces, clips, markers, tokenizer)
