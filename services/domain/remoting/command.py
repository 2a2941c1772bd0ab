"""RemotingCommand frames: RocketMQ's remoting wire format (../shared/docs/remoting.md §1).

| part | size | notes |
|---|---|---|
| total_len | int32 BE | 4 + header_len + body_len (itself not counted) |
| header_tag | int32 BE | serialize_type << 24 \\| header_len (24 bits); type 0 JSON, 1 ROCKETMQ |
| header | header_len | JSON object, or the binary layout below |
| body | the rest | raw bytes: message bytes for send and pull, JSON for most admin bodies |

ROCKETMQ (binary) header, big-endian:

| field | size |
|---|---|
| code | int16 (codes above 32767 only travel in JSON headers) |
| language | int8 (``LanguageCode``) |
| version | int16 |
| opaque | int32 |
| flag | int32 (bit0 response, bit1 oneway) |
| remark | int32 length + UTF-8 (0: null) |
| extFields | int32 length, then repeated int16 key length + key, int32 value length + value |

A JSON header's ``extFields`` values may be JSON numbers or booleans (ali-ons, the C++ client);
they are read as Java's ``String.valueOf`` would print them. Headers are written with string
values and keys in fastjson's (alphabetical) order; a lone surrogate (a JSON ``\\udXXX`` escape
a request may carry, echoed in a remark) is written as ``?``, as Java's ``String.getBytes(UTF_8)``
does. ``decode`` raises nothing but ``FrameError``. Nothing here opens a socket.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from json.encoder import encode_basestring as _quote

from services.domain.remoting.codes import FLAG_ONEWAY, FLAG_RESPONSE, SERVER_VERSION, LanguageCode

FRAME_MAX_BYTES = 16 * 1024 * 1024  # -Dcom.rocketmq.remoting.frameMaxLength
SERIALIZE_JSON = 0
SERIALIZE_ROCKETMQ = 1

_INT = struct.Struct(">i")
_TWO_INTS = struct.Struct(">ii")
_BINARY_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_H = struct.Struct(">h")
_LANGUAGE_NAMES = {code.value: code.name for code in LanguageCode}
_LANGUAGE_CODES = {code.name: code.value for code in LanguageCode}


class FrameError(ValueError):
    """A frame that cannot be decoded: the connection it came on is closed."""


@dataclass(slots=True)
class RemotingCommand:
    code: int
    opaque: int = 0
    flag: int = 0
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    remark: str | None = None
    language: str = "JAVA"
    version: int = SERVER_VERSION
    serialize_type: int = SERIALIZE_JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def response(
        self, code: int, remark: str | None = None, ext_fields: dict[str, str] | None = None, body: bytes = b""
    ) -> RemotingCommand:
        """The answer to this request: its opaque, the response bit, its serialization."""
        return RemotingCommand(
            code,
            self.opaque,
            FLAG_RESPONSE,
            ext_fields if ext_fields is not None else {},
            body,
            remark,
            "JAVA",
            SERVER_VERSION,
            self.serialize_type,
        )


def java_string(value: object) -> str:
    """A JSON scalar as Java's ``String.valueOf`` prints it (ali-ons sends numbers and booleans)."""
    if isinstance(value, str):
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float) and value.is_integer():
        return f"{value:.1f}"
    return str(value)


# -- decode -----------------------------------------------------------------------------------


def frame_length(prefix: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """The total_len field at ``pos``: the bytes that follow it in this frame."""
    return int(_INT.unpack_from(prefix, pos)[0])


def decode(frame: bytes | bytearray | memoryview) -> RemotingCommand:
    """A command from a frame without its total_len prefix (header_tag, header, body)."""
    if len(frame) < 4:
        raise FrameError(f"frame of {len(frame)} bytes has no header length")
    (tag,) = _INT.unpack_from(frame, 0)
    serialize_type = (tag >> 24) & 0xFF
    header_len = tag & 0xFFFFFF
    if header_len > len(frame) - 4:
        raise FrameError(f"header length {header_len} exceeds the frame's {len(frame) - 4} bytes")
    header = bytes(frame[4 : 4 + header_len])
    body = bytes(frame[4 + header_len :])
    if serialize_type == SERIALIZE_JSON:
        command = _decode_json_header(header)
    elif serialize_type == SERIALIZE_ROCKETMQ:
        command = _decode_binary_header(header)
    else:
        raise FrameError(f"unknown header serialization {serialize_type}")
    command.body = body
    return command


def _decode_json_header(header: bytes) -> RemotingCommand:
    try:
        fields = json.loads(header)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # RecursionError: "[" nested deeper than the stack
        raise FrameError(f"JSON header does not decode: {type(exc).__name__}: {exc}") from None
    if not isinstance(fields, dict):
        raise FrameError("JSON header is not an object")
    try:
        code = int(fields["code"])
        opaque = int(fields.get("opaque", 0))
        flag = int(fields.get("flag", 0))
        version = int(fields.get("version", 0))
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # OverflowError: Infinity, 1e400
        raise FrameError(f"JSON header lacks an integer code, opaque, flag or version: {exc!r}") from None
    ext = fields.get("extFields")
    if ext is None:
        ext_fields: dict[str, str] = {}
    elif isinstance(ext, dict):
        ext_fields = ext  # JSON object keys are strings; values usually are too (Java's clients)
        for value in ext.values():
            if type(value) is not str:  # ali-ons' numbers and booleans, nulls: as Java prints them
                ext_fields = {k: java_string(v) for k, v in ext.items() if v is not None}
                break
    else:
        raise FrameError("JSON header's extFields is not an object")
    remark = fields.get("remark")
    language = fields.get("language", "JAVA")
    if isinstance(language, int):
        language = _LANGUAGE_NAMES.get(language, "OTHER")
    return RemotingCommand(
        code,
        opaque,
        flag,
        ext_fields,
        b"",
        remark if isinstance(remark, str) else None,
        str(language),
        version,
        SERIALIZE_JSON,
    )


def _decode_binary_header(header: bytes) -> RemotingCommand:
    try:
        code, language, version, opaque, flag = _BINARY_FIXED.unpack_from(header, 0)
        pos = _BINARY_FIXED.size
        (remark_len,) = _INT.unpack_from(header, pos)
        pos += 4
        remark = header[pos : pos + remark_len].decode() if remark_len > 0 else None
        pos += max(remark_len, 0)
        (ext_len,) = _INT.unpack_from(header, pos)
        pos += 4
        end = pos + ext_len
        if remark_len < 0 or ext_len < 0 or end > len(header):
            raise FrameError("binary header lengths run past the header")
        ext_fields: dict[str, str] = {}
        while pos < end:
            (key_len,) = _H.unpack_from(header, pos)
            pos += 2
            key = header[pos : pos + key_len].decode()
            pos += key_len
            (value_len,) = _INT.unpack_from(header, pos)
            pos += 4
            ext_fields[key] = header[pos : pos + value_len].decode()
            pos += value_len
            if key_len < 0 or value_len < 0 or pos > end:
                raise FrameError("binary header extFields run past their length")
    except (struct.error, UnicodeDecodeError) as exc:
        raise FrameError(f"binary header does not decode: {exc}") from None
    return RemotingCommand(
        code & 0xFFFF if code < 0 else code,
        opaque,
        flag,
        ext_fields,
        b"",
        remark,
        _LANGUAGE_NAMES.get(language, "OTHER"),
        version,
        SERIALIZE_ROCKETMQ,
    )


# -- encode -----------------------------------------------------------------------------------


def encode(command: RemotingCommand) -> bytes:
    """The whole frame, total_len first, in the command's serialization (a code above 32767
    always in JSON: it does not fit the binary header)."""
    if command.serialize_type == SERIALIZE_ROCKETMQ and command.code <= 0x7FFF:
        header = _encode_binary_header(command)
        tag = (SERIALIZE_ROCKETMQ << 24) | len(header)
    else:
        header = _encode_json_header(command)
        tag = len(header)
    body = command.body
    return b"".join((_TWO_INTS.pack(4 + len(header) + len(body), tag), header, body))


def _encode_json_header(command: RemotingCommand) -> bytes:
    """The header as ``json.dumps(separators=(",", ":"), ensure_ascii=False)`` writes it, built
    directly (a quarter of a small request's CPU: bench/RESULTS.md): fastjson's order
    (alphabetical getters), remark left out when null, a lone surrogate written as "?"."""
    quote = _quote
    ext = ",".join([f"{quote(k)}:{quote(v)}" for k, v in command.ext_fields.items()])
    remark = f',"remark":{quote(command.remark)}' if command.remark is not None else ""
    return (
        f'{{"code":{command.code},"extFields":{{{ext}}},"flag":{command.flag},"language":{quote(command.language)},'
        f'"opaque":{command.opaque}{remark},"serializeTypeCurrentRPC":"JSON","version":{command.version}}}'
    ).encode(errors="replace")


def _encode_binary_header(command: RemotingCommand) -> bytes:
    remark = command.remark.encode(errors="replace") if command.remark else b""
    ext = b"".join(
        _H.pack(len(k)) + k + _INT.pack(len(v)) + v
        for k, v in (
            (key.encode(errors="replace"), value.encode(errors="replace")) for key, value in command.ext_fields.items()
        )
    )
    return b"".join(
        (
            _BINARY_FIXED.pack(
                command.code,
                _LANGUAGE_CODES.get(command.language, LanguageCode.OTHER),
                command.version,
                command.opaque,
                command.flag,
            ),
            _INT.pack(len(remark)),
            remark,
            _INT.pack(len(ext)),
            ext,
        )
    )
