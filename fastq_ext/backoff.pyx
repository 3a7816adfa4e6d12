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


# --- retry policies -------------------------------------------------------------------
# Checked input only (``fastq.retry`` checks it): ms as ints within ten years,
# attempt >= 1, rand in [0, 1). Same ints as the reference, step by step.

cdef extern from "math.h" nogil:
    double pow(double x, double y)

DEF POLYNOMIAL_MAX_N = 1000


def polynomial_ms(long long attempt, long long max_ms, double rand):
    """Sidekiq's curve: ``n**4 + 15 + rand * 10 * (n + 1)`` seconds, ``n = attempt - 1``
    (Sidekiq's ``retry_count``), capped at ``max_ms``."""
    cdef long long n = attempt - 1 if attempt > 1 else 0
    cdef long long delay
    if n >= POLYNOMIAL_MAX_N:
        return max_ms
    # one multiply, then truncation toward zero, as int(float) does
    delay = (n * n * n * n + 15) * 1000 + <long long>(rand * <double>(10000 * (n + 1)))
    return delay if delay < max_ms else max_ms


def doubling_ms(long long attempt, long long min_ms, long long max_ms, long long max_doublings):
    """App Engine's bounded doubling: ``min_ms`` doubled for each retry up to
    ``max_doublings`` times, then ``2**(max_doublings - 1) * min_ms`` more per
    retry, capped at ``max_ms``."""
    cdef long long n = attempt - 1 if attempt > 1 else 0
    cdef long long doublings, delay, step, extra
    if min_ms <= 0:
        return 0
    doublings = n if n < max_doublings else max_doublings
    if doublings >= 62 or max_ms < 0 or min_ms > (max_ms >> doublings):
        return max_ms
    delay = min_ms << doublings
    if n > max_doublings:
        step = (min_ms << max_doublings) >> 1
        extra = n - max_doublings
        if step > 0:
            if extra > (max_ms - delay) // step:
                return max_ms
            delay += extra * step
    return delay if delay < max_ms else max_ms


def geometric_ms(long long attempt, long long base_ms, double ratio, long long max_ms):
    """``base_ms * ratio**n``, ``n = attempt - 1``, capped at ``max_ms``."""
    cdef long long n = attempt - 1 if attempt > 1 else 0
    cdef double delay
    if base_ms <= 0:
        return 0
    delay = <double>base_ms * pow(ratio, <double>n)  # overflow: inf, capped below
    if not delay < <double>max_ms:
        return max_ms
    return <long long>delay


def listed_ms(long long attempt, tuple delays_ms):
    """``delays_ms[n]``, ``n = attempt - 1``; the last one repeated."""
    cdef Py_ssize_t n = attempt - 1 if attempt > 1 else 0
    cdef Py_ssize_t last = len(delays_ms) - 1
    if last < 0:  # bounds are not checked in this module: refuse as Python would
        raise IndexError("tuple index out of range")
    return delays_ms[n if n < last else last]
