"""URLs as every message shows them: the password of a ``user:password@`` part masked.

Every reference connector names its endpoint in errors, logs and reprs; credentials in
the URL must reach none of them (a log, a Spark UI, a traceback).
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Final

_USERINFO_PASSWORD: Final = re.compile(r"^([^:/?#]*://[^/?#@:]*:)[^/?#]*@")


def masked_url(url: str) -> str:
    """``url`` with the password of its ``user:password@`` part replaced by ``***``.

    Every message and repr of the sink names its URL this way, so credentials in
    the URL never reach a log, a Spark UI or a traceback. Works on URLs that do not
    parse too (a bad port), for the configuration errors that name them.
    """
    try:
        parts = urllib.parse.urlsplit(url)
        password = parts.password
    except ValueError:
        return _USERINFO_PASSWORD.sub(r"\1***@", url)
    if password is None:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return parts._replace(netloc=f"{user}:***@{host}").geturl()


__all__ = ["masked_url"]
