# cython: language_level=3
"""Job ids by the batch, native port of :mod:`fastq._pyimpl.ids`."""

from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF
from libc.string cimport memcpy

cdef extern from "Python.h":
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    void* PyUnicode_DATA(object o)


def counter_ids(str prefix, Py_ssize_t lo, Py_ssize_t hi, str alphabet):
    """As :func:`fastq._pyimpl.ids.counter_ids`."""
    cdef Py_ssize_t base = len(alphabet)
    if base < 2 or not alphabet.isascii() or not prefix.isascii():
        raise ValueError("counter_ids takes an ASCII prefix and alphabet")
    if lo < 0 or hi > base ** 4:
        raise ValueError(f"counter values {lo}..{hi} outside 0..{base ** 4}")
    cdef bytes digits = alphabet.encode("ascii")
    cdef const char* d = digits
    cdef bytes head = prefix.encode("ascii")
    cdef Py_ssize_t lp = len(head)
    cdef Py_ssize_t n = hi - lo if hi > lo else 0
    cdef list out = PyList_New(n)
    cdef Py_ssize_t i, c
    cdef char* p
    cdef object s
    for i in range(n):
        c = lo + i
        s = PyUnicode_New(lp + 4, 127)
        p = <char*>PyUnicode_DATA(s)
        memcpy(p, <const char*>head, lp)
        p[lp + 3] = d[c % base]
        c //= base
        p[lp + 2] = d[c % base]
        c //= base
        p[lp + 1] = d[c % base]
        p[lp] = d[c // base]
        Py_INCREF(s)
        PyList_SET_ITEM(out, i, s)
    return out
