# cython: language_level=3
"""Retry backoff math, native port of :mod:`fastq._pyimpl.backoff`.

The common case (int attempt/base/max, float jitter/rand) runs in C integers and
doubles; anything else (bools, big ints beyond 64 bits, int jitter, ...) runs the
reference algorithm on Python objects, so results and exceptions are identical.
"""

from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_CheckExact
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact, PyLong_FromDouble

import builtins

cdef extern from *:
    """
    /* delay * (1.0 - jitter) + delay * jitter * rand, rounded step by step exactly
       as Python evaluates it: the volatile temporaries forbid the compiler from
       fusing a multiply and an add into one FMA (which rounds once, not twice). */
    static double fastq_jittered(double delay, double jitter, double rand) {
        volatile double head = delay * (1.0 - jitter);
        volatile double scaled = delay * jitter;
        volatile double spread = scaled * rand;
        return head + spread;
    }
    """
    double fastq_jittered(double delay, double jitter, double rand) nogil

# Opaque Python constants for the generic path: Cython cannot specialise
# operations on them, so every operation there has plain Python semantics.
cdef object _ZERO = 0
cdef object _ONE = 1
cdef object _SIXTY_TWO = 62
cdef object _ZERO_F = 0.0
cdef object _ONE_F = 1.0
cdef object _min = builtins.min
cdef object _int = builtins.int


cdef object _backoff_generic(object attempt, object base_ms, object max_ms, object jitter,
                             object rand):
    # The reference, line by line.
    if attempt < _ONE:
        attempt = _ONE
    if base_ms <= _ZERO:
        return _ZERO
    exponent = attempt - _ONE
    if exponent >= _SIXTY_TWO or base_ms > (max_ms >> exponent):
        delay = max_ms
    else:
        delay = base_ms << exponent
    delay = _min(delay, max_ms)
    if jitter <= _ZERO_F:
        return delay
    if jitter > _ONE_F:
        jitter = _ONE_F
    return _int(delay * (_ONE_F - jitter) + delay * jitter * rand)


def backoff_ms(attempt, base_ms, max_ms, jitter, rand):
    """Delay before retry number ``attempt`` (1 = first retry), in ms.

    Exponential: ``base_ms * 2 ** (attempt - 1)``, capped at ``max_ms``; then the
    top ``jitter`` fraction of it is scaled by ``rand`` (a uniform draw in
    [0, 1)), so ``jitter=0.5`` spreads the delay over ``[d/2, d)``.
    """
    cdef int overflow = 0
    cdef long long a, b, m, exponent, delay
    cdef double j, r
    if not (PyLong_CheckExact(attempt) and PyLong_CheckExact(base_ms)
            and PyLong_CheckExact(max_ms) and PyFloat_CheckExact(jitter)
            and PyFloat_CheckExact(rand)):
        return _backoff_generic(attempt, base_ms, max_ms, jitter, rand)

    # attempt: clamp to [1, 64] in Python-int space; past 63 the result no longer moves.
    a = PyLong_AsLongLongAndOverflow(attempt, &overflow)
    if overflow > 0 or (overflow == 0 and a > 64):
        a = 64
    elif overflow < 0 or a < 1:
        a = 1

    b = PyLong_AsLongLongAndOverflow(base_ms, &overflow)
    if overflow < 0 or (overflow == 0 and b <= 0):
        return 0
    if overflow > 0:
        return _backoff_generic(attempt, base_ms, max_ms, jitter, rand)
    m = PyLong_AsLongLongAndOverflow(max_ms, &overflow)
    if overflow != 0:
        return _backoff_generic(attempt, base_ms, max_ms, jitter, rand)

    exponent = a - 1
    # b > 0 here; a negative cap is below any positive base (and >> of a negative
    # number is implementation-defined in C, so keep it out of the shift).
    if exponent >= 62 or m < 0 or b > (m >> exponent):
        delay = m
    else:
        delay = b << exponent  # <= m: cannot overflow
    if m < delay:
        delay = m

    j = PyFloat_AS_DOUBLE(jitter)
    if j <= 0.0:  # false for NaN, as in Python
        return delay
    if j > 1.0:
        j = 1.0
    r = fastq_jittered(<double>delay, j, PyFloat_AS_DOUBLE(rand))
    if -9223372036854775808.0 < r < 9223372036854775808.0:
        return <long long>r  # C truncates toward zero, like int(float)
    # out of int64 range, inf or NaN: int(float) builds the big int or raises
    return PyLong_FromDouble(r)
