"""Secrets never reach a file or a terminal: a URL's user name and password (``http://user:KEY@host``)
and its query values (``?api_key=KEY``) are replaced by ``***`` wherever a URL is stored (config.json,
label_config.json, viewer.html) or shown (errors, warnings). API keys themselves are read from the
environment only (``--api-key-env NAME``, else ``OPENAI_API_KEY``), never from a flag value or a file."""
from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

HIDDEN = "***"
URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]*[^\s'\"<>.,:;)\]]")   # not the sentence's trailing ':'


def redact_url(url: str) -> str:
    """``url`` without credentials: userinfo becomes ``***@``, every query value ``***``."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            netloc = f"{HIDDEN}@{netloc.rpartition('@')[2]}"
        query = parts.query
        if query:
            query = "&".join(f"{k}={HIDDEN}" for k, _ in parse_qsl(query, keep_blank_values=True)) or HIDDEN
        return urlunsplit((parts.scheme, netloc, parts.path, query, "")) if netloc != parts.netloc or query \
            or parts.fragment else url
    except ValueError:                  # not parseable as a URL: hide everything after the scheme
        scheme, sep, _ = url.partition("://")
        return f"{scheme}{sep}{HIDDEN}" if sep else HIDDEN


def redact_text(text: str) -> str:
    """Every URL in ``text`` redacted."""
    return URL.sub(lambda m: redact_url(m.group(0)), text)


def redact_config(value: Any) -> Any:
    """A config (dicts, lists, strings) with every URL in its strings redacted."""
    if isinstance(value, dict):
        return {k: redact_config(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_config(v) for v in value)
    if isinstance(value, str) and "://" in value:
        return redact_text(value)
    return value
