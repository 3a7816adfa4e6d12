# cython: language_level=3
"""Envelope codec, native port of :mod:`fastq._pyimpl.codec`.

Same functions, same results, same exceptions (types and messages) as the
reference. The JSON work itself stays with orjson; what is native is the loop
around it: typed locals, list/dict fast paths and one allocation per envelope.

Built with ``boundscheck=False, wraparound=False``: every C-integer index used
here is non-negative and checked against the current size before use.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_CheckExact, PyDict_GetItem, PyDict_GetItemWithError
from cpython.list cimport PyList_CheckExact, PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_CheckExact, PyLong_FromSsize_t
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_CheckExact
from libc.string cimport memcpy

import builtins

import orjson

# Looked up once: no per-item module attribute lookups.
cdef object _dumps = orjson.dumps
cdef object _loads = orjson.loads
cdef object _JSONDecodeError = orjson.JSONDecodeError
cdef object _range = builtins.range

cdef bytes _EMPTY_ARGS = b"[]"
cdef bytes _EMPTY_KWARGS = b"{}"
cdef bytes _EMPTY_OBJECT = b"{}"
cdef bytes _CLOSE = b"}"
cdef bytes _COMMA = b","
cdef bytes _EMPTY = b""
cdef bytes _P_ID = b'{"id":'
cdef bytes _P_ARGS = b',"args":'
cdef bytes _P_KWARGS = b',"kwargs":'

# Lengths of the three fixed pieces of an envelope, and their bytes.
cdef enum:
    _L_ID = 6        # {"id":
    _L_ARGS = 8      # ,"args":
    _L_KWARGS = 10   # ,"kwargs":
cdef const char* _C_ID = b'{"id":'
cdef const char* _C_ARGS = b',"args":'
cdef const char* _C_KWARGS = b',"kwargs":'

cdef str _K_NAME = "name"
cdef str _K_ARGS = "args"
cdef str _K_KWARGS = "kwargs"


cdef extern from "Python.h":
    Py_ssize_t PyBytes_GET_SIZE(object o)


def envelope_tail(shared):
    """Encode the fields a batch shares, as the end of an envelope: ``,"name":...}``."""
    cdef bytes body = _dumps(dict(shared))
    if body == _EMPTY_OBJECT:
        return _CLOSE
    return _COMMA + body[1:]


cdef inline bytes _splice(bytes jid, bytes a, bytes k, bytes tail):
    """``{"id":<jid>,"args":<a>,"kwargs":<k><tail>`` built in one allocation."""
    cdef Py_ssize_t lj = PyBytes_GET_SIZE(jid)
    cdef Py_ssize_t la = PyBytes_GET_SIZE(a)
    cdef Py_ssize_t lk = PyBytes_GET_SIZE(k)
    cdef Py_ssize_t lt = PyBytes_GET_SIZE(tail)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, _L_ID + lj + _L_ARGS + la + _L_KWARGS + lk + lt)
    cdef char* p = PyBytes_AS_STRING(out)
    memcpy(p, _C_ID, _L_ID)
    p += _L_ID
    memcpy(p, PyBytes_AS_STRING(jid), lj)
    p += lj
    memcpy(p, _C_ARGS, _L_ARGS)
    p += _L_ARGS
    memcpy(p, PyBytes_AS_STRING(a), la)
    p += la
    memcpy(p, _C_KWARGS, _L_KWARGS)
    p += _L_KWARGS
    memcpy(p, PyBytes_AS_STRING(k), lk)
    p += lk
    memcpy(p, PyBytes_AS_STRING(tail), lt)
    return out


cdef inline bytes _encode(object job_id, object args, object kwargs, object tail):
    # Same evaluation order as the reference: id, then args, then kwargs, then join.
    cdef object jid = _dumps(job_id)
    cdef object a = _dumps(args) if args else _EMPTY_ARGS
    cdef object k = _dumps(kwargs) if kwargs else _EMPTY_KWARGS
    if PyBytes_CheckExact(tail) and PyBytes_CheckExact(jid) and PyBytes_CheckExact(a) \
            and PyBytes_CheckExact(k):
        return _splice(<bytes>jid, <bytes>a, <bytes>k, <bytes>tail)
    # Anything unusual (a bytes-like or wrong-typed tail): the reference's own join,
    # so errors and results are the same.
    return _EMPTY.join((_P_ID, jid, _P_ARGS, a, _P_KWARGS, k, tail))


def encode_envelope(job_id, args, kwargs, tail):
    """Encode one envelope. Raises TypeError when args or kwargs are not JSON-serializable."""
    return _encode(job_id, args, kwargs, tail)


def encode_calls(ids, calls, tail):
    """Encode one envelope per call of a blast.

    Each call is a tuple or list of positional arguments, or a dict of keyword
    arguments.

    Raises:
        TypeError: a call is neither, or holds something JSON cannot carry; the
            message names the call's index.
    """
    cdef list out = []
    cdef Py_ssize_t i = 0
    cdef bint ids_is_list = PyList_CheckExact(ids)
    cdef bint inside = False
    cdef object call
    cdef object job_id
    try:
        for call in calls:
            inside = True
            if isinstance(call, (tuple, list)):
                if ids_is_list and i < PyList_GET_SIZE(ids):
                    job_id = <object>PyList_GET_ITEM(ids, i)
                else:
                    job_id = ids[PyLong_FromSsize_t(i)]
                out.append(_encode(job_id, call, None, tail))
            elif isinstance(call, dict):
                if ids_is_list and i < PyList_GET_SIZE(ids):
                    job_id = <object>PyList_GET_ITEM(ids, i)
                else:
                    job_id = ids[PyLong_FromSsize_t(i)]
                out.append(_encode(job_id, None, call, tail))
            else:
                raise TypeError(
                    "each call must be a tuple/list of arguments or a dict of keyword "
                    f"arguments, not {type(call).__name__}"
                )
            inside = False
            i += 1
    except TypeError as exc:
        if not inside:
            # raised by iterating ``calls`` itself: not wrapped by the reference either
            raise
        raise TypeError(f"call {i}: {exc}") from None
    return out


cdef inline object _item(list reply, Py_ssize_t i):
    """``reply[i]`` for ``i >= 0``, re-checking the size (the list may have changed)."""
    if i < PyList_GET_SIZE(reply):
        return <object>PyList_GET_ITEM(reply, i)
    raise IndexError("list index out of range")


cdef tuple _decode_list(list reply, Py_ssize_t start, object registry):
    cdef list runnable = []
    cdef list broken = []
    cdef Py_ssize_t stop = PyList_GET_SIZE(reply) - 2
    cdef Py_ssize_t i = start
    cdef bint reg_is_dict = PyDict_CheckExact(registry)
    cdef PyObject* found
    cdef object job_id, env, name, target, args, kwargs, attempts
    while i < stop:
        job_id = _item(reply, i)
        try:
            env = _loads(_item(reply, i + 1))
        except _JSONDecodeError as exc:
            broken.append((job_id, f"invalid JSON: {exc}"))
            i += 3
            continue
        if not PyDict_CheckExact(env):
            broken.append((job_id, f"envelope is a JSON {type(env).__name__}, not an object"))
            i += 3
            continue
        found = PyDict_GetItem(env, _K_NAME)
        name = <object>found if found is not NULL else None
        if PyUnicode_CheckExact(name):
            if reg_is_dict:
                found = PyDict_GetItemWithError(registry, name)
                target = <object>found if found is not NULL else None
            else:
                target = registry.get(name)
        else:
            target = None
        if target is None:
            broken.append((job_id, f"unknown job name {name!r}"))
            i += 3
            continue
        found = PyDict_GetItem(env, _K_ARGS)
        args = <object>found if found is not NULL else ()
        found = PyDict_GetItem(env, _K_KWARGS)
        kwargs = <object>found if found is not NULL else {}
        if not PyList_CheckExact(args):
            broken.append((job_id, f"args must be a JSON array, not {type(args).__name__}"))
            i += 3
            continue
        if not PyDict_CheckExact(kwargs):
            broken.append((job_id, f"kwargs must be a JSON object, not {type(kwargs).__name__}"))
            i += 3
            continue
        attempts = _item(reply, i + 2)
        if not PyLong_CheckExact(attempts):
            attempts = int(attempts)
        runnable.append((job_id, target, args, kwargs, attempts, env))
        i += 3
    return runnable, broken


cdef tuple _decode_generic(object reply, object start, object registry):
    # Any sequence, or an unusual start: the reference loop with Python semantics
    # (object indices, so negative indices behave as in Python).
    cdef list runnable = []
    cdef list broken = []
    for i in _range(start, len(reply) - 2, 3):
        job_id = reply[i]
        try:
            env = _loads(reply[i + 1])
        except _JSONDecodeError as exc:
            broken.append((job_id, f"invalid JSON: {exc}"))
            continue
        if type(env) is not dict:
            broken.append((job_id, f"envelope is a JSON {type(env).__name__}, not an object"))
            continue
        name = env.get("name")
        target = registry.get(name) if type(name) is str else None
        if target is None:
            broken.append((job_id, f"unknown job name {name!r}"))
            continue
        args = env.get("args", ())
        kwargs = env.get("kwargs", {})
        if type(args) is not list:
            broken.append((job_id, f"args must be a JSON array, not {type(args).__name__}"))
            continue
        if type(kwargs) is not dict:
            broken.append((job_id, f"kwargs must be a JSON object, not {type(kwargs).__name__}"))
            continue
        runnable.append((job_id, target, args, kwargs, int(reply[i + 2]), env))
    return runnable, broken


def decode_claim(reply, start, registry):
    """Decode the jobs of a claim reply.

    ``reply[start:]`` holds triples ``id, envelope, attempts`` (bytes, bytes, int).

    Returns ``(runnable, broken)``: runnable is a list of
    ``(id, registry[name], args, kwargs, attempts, envelope_dict)``; broken a list
    of ``(id, reason)`` for payloads that are not JSON objects, name a job
    missing from ``registry``, or carry args/kwargs of the wrong type.
    """
    cdef Py_ssize_t s
    if PyList_CheckExact(reply) and PyLong_CheckExact(start) and start >= 0:
        if start >= PyList_GET_SIZE(reply):
            return [], []
        s = start
        return _decode_list(<list>reply, s, registry)
    return _decode_generic(reply, start, registry)
