"""The ACL signature a remoting client puts in ``extFields.Signature`` (../shared/docs/remoting.md
§4 "ACL signature"; RocketMQ's ``AclClientRPCHook``, ``AclUtils.combineRequestContent``,
``AclSigner``; the 5.x check is ``DefaultAuthenticationContextBuilder``).

The signed content is the **values** of every extField except ``Signature``, in the order of
their keys (Java's ``TreeMap``: UTF-16 code-unit order), concatenated with no separators and
encoded UTF-8, followed by the raw body bytes. The signature is Base64 of HmacSHA1(secretKey,
content). ``AccessKey`` (and ``SecurityToken`` when set) are extFields, so they are signed too;
ali-ons and the C++ client also add ``OnsChannel`` (default "ALIYUN"), signed the same way.

The server skips the key ``_UNIQUE_KEY_QUERY`` when the request's version is at most V4_9_3
(399): those clients added it after signing. The C++ client always sends ``Signature``,
``AccessKey`` and ``OnsChannel``, empty when it has no credentials: an empty (or missing)
AccessKey is an anonymous request (:func:`is_anonymous`).

A value a client sent as a JSON number or boolean must reach :func:`combine_request_content`
as the text the client signed (the header decoder's Java ``String.valueOf``); a None value (a
JSON null) is left out, as ali-ons leaves out the fields it has no value for.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

SIGNATURE = "Signature"  # SessionCredentials.SIGNATURE
ACCESS_KEY = "AccessKey"  # SessionCredentials.ACCESS_KEY
SECURITY_TOKEN = "SecurityToken"  # SessionCredentials.SECURITY_TOKEN
ONS_CHANNEL = "OnsChannel"  # ali-ons and the C++ client
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"  # MixAll.UNIQUE_MSG_QUERY_FLAG
SKIP_UNIQUE_KEY_QUERY_VERSION_MAX = 399  # MQVersion V4_9_3: versions <= this skip the key


def _utf16_order(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def combine_request_content(
    ext_fields: Mapping[str, str | None], body: bytes | bytearray | memoryview | None, skip_unique_key_query: bool
) -> bytes:
    """The bytes a client signs: the extField values (``Signature`` excluded; also
    ``_UNIQUE_KEY_QUERY`` when ``skip_unique_key_query``) in key order, then ``body``."""
    keys = [k for k in ext_fields if k != SIGNATURE and not (skip_unique_key_query and k == UNIQUE_KEY_QUERY)]
    if all(k.isascii() for k in keys):
        keys.sort()
    else:
        keys.sort(key=_utf16_order)  # TreeMap<String>: UTF-16 code units, not code points
    text = "".join([value for value in (ext_fields[k] for k in keys) if value is not None])
    content = text.encode("utf-8", "surrogatepass")
    return content + bytes(body) if body else content


def skip_unique_key_query_for(version: int) -> bool:
    """Whether a request of this ``version`` was signed without ``_UNIQUE_KEY_QUERY``."""
    return version <= SKIP_UNIQUE_KEY_QUERY_VERSION_MAX


def sign(secret_key: str | bytes, content: bytes) -> str:
    """``AclSigner.calSignature``: Base64 (standard alphabet, padded) of HmacSHA1."""
    key = secret_key.encode("utf-8") if isinstance(secret_key, str) else secret_key
    return base64.b64encode(hmac.digest(key, content, hashlib.sha1)).decode("ascii")


def verify(secret_key: str | bytes, content: bytes, signature: str | None) -> bool:
    """Whether ``signature`` is the signature of ``content``, compared in constant time."""
    if not signature:
        return False
    return hmac.compare_digest(sign(secret_key, content).encode("ascii"), signature.encode("utf-8", "replace"))


def verify_request(
    ext_fields: Mapping[str, str | None],
    body: bytes | bytearray | memoryview | None,
    version: int,
    secret_key: str | bytes,
) -> bool:
    """Whether a request's ``Signature`` extField signs its extFields and body with
    ``secret_key`` (the secret of the user its ``AccessKey`` names)."""
    content = combine_request_content(ext_fields, body, skip_unique_key_query_for(version))
    return verify(secret_key, content, ext_fields.get(SIGNATURE))


def is_anonymous(ext_fields: Mapping[str, str | None]) -> bool:
    """A request without credentials: no AccessKey, or an empty one (the C++ client's form)."""
    return not ext_fields.get(ACCESS_KEY)
