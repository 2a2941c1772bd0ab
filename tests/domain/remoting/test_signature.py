"""The ACL signature (../shared/docs/remoting.md §4 "ACL signature"): the extField values but
Signature's, in TreeMap key order, concatenated, UTF-8, then the body; Base64(HmacSHA1)."""

from __future__ import annotations

import base64
import hashlib
import hmac

from services.domain.remoting.signature import (
    combine_request_content,
    is_anonymous,
    sign,
    skip_unique_key_query_for,
    verify,
    verify_request,
)

SECRET = "12345678"


def test_sign_is_base64_of_hmac_sha1_rfc2202_case_2():
    # RFC 2202 test case 2: HMAC-SHA1("Jefe", "what do ya want for nothing?").
    expected = base64.b64encode(bytes.fromhex("effcdf6ae5eb2fa2d27416d5f184df9c259a7c79")).decode()
    assert sign("Jefe", b"what do ya want for nothing?") == expected == "7/zfauXrL6LSdBbV8YTfnCWafHk="
    assert sign(b"Jefe", b"what do ya want for nothing?") == expected


def test_java_client_content_layout():
    # AclClientRPCHook on a SEND_MESSAGE_V2: AccessKey added, then every value in key order.
    fields = {"a": "PG", "b": "T", "c": "TBW102", "d": "4", "e": "0", "AccessKey": "rocketmq2"}
    body = b"\x00body\xff"
    content = combine_request_content(fields, body, skip_unique_key_query=False)
    assert content == b"rocketmq2" + b"PG" + b"T" + b"TBW102" + b"4" + b"0" + body
    signature = base64.b64encode(hmac.new(SECRET.encode(), content, hashlib.sha1).digest()).decode()
    signed = {**fields, "Signature": signature}
    assert combine_request_content(signed, body, skip_unique_key_query=False) == content  # Signature left out
    assert verify_request(signed, body, 479, SECRET)
    assert not verify_request(signed, body + b"!", 479, SECRET)
    assert not verify_request({**signed, "e": "1"}, body, 479, SECRET)
    assert not verify_request(signed, body, 479, "wrong-secret")


def test_no_body_and_empty_body_add_nothing():
    fields = {"AccessKey": "ak", "topic": "T"}
    assert combine_request_content(fields, None, False) == b"akT"
    assert combine_request_content(fields, b"", False) == b"akT"


def test_security_token_is_signed_like_any_field():
    fields = {"AccessKey": "ak", "SecurityToken": "tok", "consumerGroup": "G"}
    assert combine_request_content(fields, None, False) == b"aktokG"


def test_values_are_utf8_and_keys_sort_by_utf16_units():
    # TreeMap<String> compares UTF-16 units: U+1F600 (D83D DE00) sorts before U+FB01.
    fields = {"\ufb01": "second", "\U0001f600": "first", "Z": "é"}
    assert combine_request_content(fields, None, False) == "éfirstsecond".encode()


def test_unique_key_query_is_skipped_for_versions_up_to_4_9_3():
    fields = {"AccessKey": "ak", "_UNIQUE_KEY_QUERY": "true", "key": "K"}
    assert skip_unique_key_query_for(399) and not skip_unique_key_query_for(401)
    assert combine_request_content(fields, None, skip_unique_key_query=True) == b"akK"
    assert combine_request_content(fields, None, skip_unique_key_query=False) == b"aktrueK"
    old = {**fields, "Signature": sign(SECRET, b"akK")}
    assert verify_request(old, None, 399, SECRET)
    assert not verify_request(old, None, 401, SECRET)


def test_ali_ons_content_layout():
    # ali-ons' channel.beforeRequest signs AccessKey, OnsChannel and its header fields (toString,
    # nulls left out) in JavaScript's sort order; on the wire numbers and booleans arrive as
    # JSON values, which the header decoder turns into the same text.
    wire = {"a": "PG", "b": "T", "d": "4", "e": "0", "k": "false", "AccessKey": "ak", "OnsChannel": "ALIYUN"}
    body = b"hello"
    content = combine_request_content(wire, body, skip_unique_key_query=False)
    assert content == b"ak" + b"ALIYUN" + b"PG" + b"T" + b"4" + b"0" + b"false" + body
    wire["Signature"] = base64.b64encode(hmac.new(b"sk", content, hashlib.sha1).digest()).decode()
    assert verify_request(wire, body, 121, "sk")


def test_a_null_value_is_left_out():
    assert combine_request_content({"AccessKey": "ak", "remark": None, "x": "1"}, None, False) == b"ak1"


def test_cpp_client_always_sends_the_three_keys():
    anonymous = {"Signature": "", "AccessKey": "", "OnsChannel": "", "topic": "T"}
    assert is_anonymous(anonymous)
    assert is_anonymous({"topic": "T"})
    signed = {"AccessKey": "ak", "OnsChannel": "ALIYUN", "queueId": "1", "topic": "T"}
    content = combine_request_content(signed, b"m", False)
    assert content == b"akALIYUN1Tm"
    signed["Signature"] = sign("sk", content)
    assert not is_anonymous(signed)
    assert verify_request(signed, b"m", 317, "sk")


def test_verify_refuses_missing_and_foreign_signatures():
    assert not verify("sk", b"x", None)
    assert not verify("sk", b"x", "")
    assert not verify("sk", b"x", "é")
    assert verify("sk", b"x", sign("sk", b"x"))


def test_cpp_client_signs_with_an_empty_secret_when_it_has_no_credentials():
    # A SEND_MESSAGE 10 as rocketmq-client-python 0.5.0rc2's C++ client sent it to a capture
    # listener (tests/remoting/golden/cpp.json, send): no credentials, yet a Signature, made
    # with an empty secret over the same layout; numbers in extFields read as their text.
    ext_fields = {
        "AccessKey": "",
        "OnsChannel": "ALIYUN",
        "Signature": "xKf+nWU0RNTCkkM6igANjLbrs70=",
        "batch": "0",
        "bornTimestamp": "1795919255469",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "flag": "0",
        "producerGroup": "PeerFrameGroup",
        "properties": "KEYS\x01k1 k2\x02TAGS\x01TagA\x02UNIQ_KEY\x010100007F0000571600002D7A16960100\x02WAIT\x01true\x02a\x011\x02",
        "queueId": "0",
        "reconsumeTimes": "0",
        "sysFlag": "0",
        "topic": "PeerFrameTopic",
        "unitMode": "0",
    }
    assert is_anonymous(ext_fields)
    assert verify_request(ext_fields, b"hello", 63, "")
    assert not verify_request(ext_fields, b"hellO", 63, "")
