"""FarmHash ``Fingerprint64`` (the "na" variant), the hash behind TensorFlow's
``to_hash_bucket_fast`` and so Keras' ``Hashing`` layer: written here from the published algorithm
so bucket numbers match TensorFlow's exactly. Pure Python on 64-bit integers (masked)."""
import struct

_M = (1 << 64) - 1
K0 = 0xc3a5c85c97cb3127
K1 = 0xb492b66fbe98f273
K2 = 0x9ae16a3b2f90404f


def _rot(v, s):
    return ((v >> s) | (v << (64 - s))) & _M if s else v


def _f64(b, i):
    return struct.unpack_from("<Q", b, i)[0]


def _f32(b, i):
    return struct.unpack_from("<I", b, i)[0]


def _mix(v):
    return v ^ (v >> 47)


def _h16(u, v, mul):
    a = ((u ^ v) * mul) & _M
    a ^= a >> 47
    b = ((v ^ a) * mul) & _M
    b ^= b >> 47
    return (b * mul) & _M


def _len0to16(b, n):
    if n >= 8:
        mul = K2 + n * 2
        a = (_f64(b, 0) + K2) & _M
        c = _f64(b, n - 8)
        return _h16((_rot(c, 37) * mul + a) & _M, ((_rot(a, 25) + c) * mul) & _M, mul)
    if n >= 4:
        mul = K2 + n * 2
        return _h16((n + (_f32(b, 0) << 3)) & _M, _f32(b, n - 4), mul)
    if n > 0:
        y = b[0] + (b[n >> 1] << 8)
        z = n + (b[n - 1] << 2)
        return (_mix(((y * K2) ^ (z * K0)) & _M) * K2) & _M
    return K2


def _len17to32(b, n):
    mul = K2 + n * 2
    a = (_f64(b, 0) * K1) & _M
    c0 = _f64(b, 8)
    c = (_f64(b, n - 8) * mul) & _M
    d = (_f64(b, n - 16) * K2) & _M
    return _h16((_rot((a + c0) & _M, 43) + _rot(c, 30) + d) & _M, (a + _rot((c0 + K2) & _M, 18) + c) & _M, mul)


def _len33to64(b, n):
    mul = K2 + n * 2
    a = (_f64(b, 0) * K2) & _M
    b8 = _f64(b, 8)
    c = (_f64(b, n - 8) * mul) & _M
    d = (_f64(b, n - 16) * K2) & _M
    y = (_rot((a + b8) & _M, 43) + _rot(c, 30) + d) & _M
    z = _h16(y, (a + _rot((b8 + K2) & _M, 18) + c) & _M, mul)
    e = (_f64(b, 16) * mul) & _M
    f = _f64(b, 24)
    g = ((y + _f64(b, n - 32)) * mul) & _M
    h = ((z + _f64(b, n - 24)) * mul) & _M
    return _h16((_rot((e + f) & _M, 43) + _rot(g, 30) + h) & _M, (e + _rot((f + a) & _M, 18) + g) & _M, mul)


def _weak32(b, i, a, c):
    w, x, y, z = _f64(b, i), _f64(b, i + 8), _f64(b, i + 16), _f64(b, i + 24)
    a = (a + w) & _M
    c = _rot((c + a + z) & _M, 21)
    t = a
    a = (a + x + y) & _M
    c = (c + _rot(a, 44)) & _M
    return (a + z) & _M, (c + t) & _M


def fingerprint64(data):
    """FarmHash Fingerprint64 of ``data`` (bytes or str, UTF-8)."""
    b = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    n = len(b)
    if n <= 16:
        return _len0to16(b, n)
    if n <= 32:
        return _len17to32(b, n)
    if n <= 64:
        return _len33to64(b, n)
    seed = 81
    x = seed
    y = (seed * K1 + 113) & _M
    z = (_mix((y * K2 + 113) & _M) * K2) & _M
    v0 = v1 = w0 = w1 = 0
    x = (x * K2 + _f64(b, 0)) & _M
    end = ((n - 1) // 64) * 64
    last64 = end + ((n - 1) & 63) - 63
    s = 0
    while True:
        x = (_rot((x + y + v0 + _f64(b, s + 8)) & _M, 37) * K1) & _M
        y = (_rot((y + v1 + _f64(b, s + 48)) & _M, 42) * K1) & _M
        x ^= w1
        y = (y + v0 + _f64(b, s + 40)) & _M
        z = (_rot((z + w0) & _M, 33) * K1) & _M
        v0, v1 = _weak32(b, s, (v1 * K1) & _M, (x + w0) & _M)
        w0, w1 = _weak32(b, s + 32, (z + w1) & _M, (y + _f64(b, s + 16)) & _M)
        z, x = x, z
        s += 64
        if s == end:
            break
    mul = K1 + ((z & 0xff) << 1)
    s = last64
    w0 = (w0 + ((n - 1) & 63)) & _M
    v0 = (v0 + w0) & _M
    w0 = (w0 + v0) & _M
    x = (_rot((x + y + v0 + _f64(b, s + 8)) & _M, 37) * mul) & _M
    y = (_rot((y + v1 + _f64(b, s + 48)) & _M, 42) * mul) & _M
    x ^= (w1 * 9) & _M
    y = (y + v0 * 9 + _f64(b, s + 40)) & _M
    z = (_rot((z + w0) & _M, 33) * mul) & _M
    v0, v1 = _weak32(b, s, (v1 * mul) & _M, (x + w0) & _M)
    w0, w1 = _weak32(b, s + 32, (z + w1) & _M, (y + _f64(b, s + 16)) & _M)
    z, x = x, z
    return _h16((_h16(v0, w0, mul) + _mix(y) * K0 + z) & _M, (_h16(v1, w1, mul) + x) & _M, mul)


def siphash24(k0, k1, data):
    """SipHash-2-4 of ``data`` with the 128-bit key ``(k0, k1)`` (TensorFlow's ``StrongKeyedHash``,
    behind ``to_hash_bucket_strong`` and Keras' salted ``Hashing``)."""
    b = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    v0 = k0 ^ 0x736f6d6570736575
    v1 = k1 ^ 0x646f72616e646f6d
    v2 = k0 ^ 0x6c7967656e657261
    v3 = k1 ^ 0x7465646279746573

    def rounds(v0, v1, v2, v3, n):
        for _ in range(n):
            v0 = (v0 + v1) & _M
            v1 = ((v1 << 13) | (v1 >> 51)) & _M
            v1 ^= v0
            v0 = ((v0 << 32) | (v0 >> 32)) & _M
            v2 = (v2 + v3) & _M
            v3 = ((v3 << 16) | (v3 >> 48)) & _M
            v3 ^= v2
            v0 = (v0 + v3) & _M
            v3 = ((v3 << 21) | (v3 >> 43)) & _M
            v3 ^= v0
            v2 = (v2 + v1) & _M
            v1 = ((v1 << 17) | (v1 >> 47)) & _M
            v1 ^= v2
            v2 = ((v2 << 32) | (v2 >> 32)) & _M
        return v0, v1, v2, v3
    n = len(b)
    full = n - n % 8
    for i in range(0, full, 8):
        m = _f64(b, i)
        v3 ^= m
        v0, v1, v2, v3 = rounds(v0, v1, v2, v3, 2)
        v0 ^= m
    last = (n & 0xff) << 56
    for i, byte in enumerate(b[full:]):
        last |= byte << (8 * i)
    v3 ^= last
    v0, v1, v2, v3 = rounds(v0, v1, v2, v3, 2)
    v0 ^= last
    v2 ^= 0xff
    v0, v1, v2, v3 = rounds(v0, v1, v2, v3, 4)
    return v0 ^ v1 ^ v2 ^ v3
