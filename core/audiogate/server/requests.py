"""Request parsing: a prepare request's body (strict UTF-8 JSON) to a :class:`PrepareCall`."""

from __future__ import annotations

import re
from typing import Any, Final

import attrs

from audiogate.jsonkeys import DuplicateKeyError, loads_unique_keys
from audiogate.server.encoding import FEATURE_FORMATS, FeatureFormat, safetensors_available
from audiogate.server.errors import BadRequestError

__all__ = ["PrepareCall", "parse_body", "parse_call"]

_OPTION_KEYS: Final = frozenset({"feature_format", "return_features"})
_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD][89a-fA-F]")


@attrs.frozen(kw_only=True)
class PrepareCall:
    """What a prepare request asks for: its chat messages and the answer's options."""

    model: str | None
    messages: list[Any]
    feature_format: FeatureFormat
    return_features: bool


def _lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def parse_body(body: bytes | bytearray) -> Any:
    """The JSON document of a request body, which must be UTF-8 (a leading BOM is dropped).

    Decoded strictly first: ``json.loads`` on bytes would also take UTF-16 and UTF-32 and
    let encoded surrogates through ("surrogatepass"). A key given twice in one object is
    refused: parsers disagree on which one counts (Python's takes the last, some proxies
    and validators the first), so a request that a filter in front of the server read
    one way must not be served another way.
    """
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadRequestError(
            f"the request body is not UTF-8: {exc.reason} at byte {exc.start}"
        ) from None
    try:
        document = loads_unique_keys(text)
    except RecursionError:
        raise BadRequestError("the request body is nested too deeply") from None
    except DuplicateKeyError as exc:
        raise BadRequestError(
            f"the request body gives the key {exc.shown} twice in one JSON object"
        ) from None
    except ValueError as exc:
        raise BadRequestError(f"the request body is not valid JSON: {exc}") from None
    del text
    # JSON admits a lone "\udXXX" escape; Python keeps it, tokenizers fail on it. The walk
    # only runs when the (UTF-8) body has such an escape at all (a valid pair is fine).
    if _SURROGATE_ESCAPE.search(body) and _lone_surrogate(document):
        raise BadRequestError("the request contains a lone UTF-16 surrogate (invalid Unicode)")
    return document


def parse_call(document: Any) -> PrepareCall:
    if not isinstance(document, dict):
        raise BadRequestError(
            f"the request body must be a JSON object (an OpenAI chat completions request), "
            f"got {type(document).__name__}"
        )
    model = document.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequestError(
            f"'model' must be a string, got {type(model).__name__}", field="model"
        )
    messages = document.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequestError("'messages' must be a non-empty list", field="messages")
    options = document.get("audiogate", {})
    if not isinstance(options, dict):
        raise BadRequestError(
            f"'audiogate' must be an object, got {type(options).__name__}", field="audiogate"
        )
    unknown = sorted(set(options) - _OPTION_KEYS)
    if unknown:
        raise BadRequestError(
            f"unknown 'audiogate' option(s) {unknown}; allowed: {sorted(_OPTION_KEYS)}",
            field="audiogate",
        )
    feature_format = options.get("feature_format", "npy")
    if feature_format not in FEATURE_FORMATS:
        raise BadRequestError(
            f"'audiogate.feature_format' must be one of {list(FEATURE_FORMATS)}, "
            f"got {feature_format!r}",
            field="audiogate.feature_format",
        )
    if feature_format == "safetensors" and not safetensors_available():
        raise BadRequestError(
            "'audiogate.feature_format' 'safetensors' needs the safetensors package on the "
            "server (pip install safetensors); use 'npy'",
            field="audiogate.feature_format",
        )
    return_features = options.get("return_features", True)
    if not isinstance(return_features, bool):
        raise BadRequestError(
            f"'audiogate.return_features' must be true or false, got {return_features!r}",
            field="audiogate.return_features",
        )
    return PrepareCall(
        model=model,
        messages=messages,
        feature_format=feature_format,
        return_features=return_features,
    )
