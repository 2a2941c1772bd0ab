"""Guava's jump consistent hash, checked against Guava's own golden values (HashingTest)."""

from services.broker.queue_selection import guava_consistent_hash


def test_guava_golden_values():
    golden100 = [0, 55, 62, 8, 45, 59, 86, 97, 82, 59, 73, 37, 17, 56, 86, 21, 90, 37, 38, 83]
    assert [guava_consistent_hash(i, 100) for i in range(20)] == golden100
    assert guava_consistent_hash(10863919174838991, 11) == 6
    assert guava_consistent_hash(2016238256797177309, 11) == 3
    assert guava_consistent_hash(1673758223894951030, 11) == 5
    assert guava_consistent_hash(2, 100001) == 80343
    assert guava_consistent_hash(2201, 100001) == 22152
    assert guava_consistent_hash(2202, 100001) == 15018


def test_negative_keys_are_javas_sign_extended_longs():
    # Java passes String.hashCode() (an int, maybe negative) sign-extended to long.
    assert 0 <= guava_consistent_hash(-1, 8) < 8
    assert guava_consistent_hash(-1, 8) == guava_consistent_hash((1 << 64) - 1, 8)


def test_one_bucket():
    assert guava_consistent_hash(123456789, 1) == 0
