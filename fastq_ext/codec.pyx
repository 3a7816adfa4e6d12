# cython: language_level=3
"""Envelope codec, native port of :mod:`fastq._pyimpl.codec`.

Same functions, same results, same exceptions (types and messages) as the
reference. The JSON work itself stays with orjson; what is native is the loop
around it: typed locals, list/dict fast paths and one allocation per envelope.
``encode_calls`` makes one orjson call per blast (all calls) instead of one
per call, and cuts the array into its elements; on any encoding
error it reruns the call-by-call loop so the error raised is the reference's.
Arguments are walked natively (type checks only) before orjson sees them, so that
nothing orjson would send as another type (a datetime, a UUID, an Enum) goes; the
message naming what was refused is the reference's own (an error path).

Built with ``boundscheck=False, wraparound=False``: every C-integer index used
here is non-negative and checked against the current size before use.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize
from cpython.bool cimport PyBool_Check
from cpython.dict cimport PyDict_CheckExact, PyDict_GetItem, PyDict_GetItemWithError, PyDict_Next
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_CheckExact
from cpython.list cimport (
    PyList_CheckExact,
    PyList_GET_ITEM,
    PyList_GET_SIZE,
    PyList_New,
    PyList_SET_ITEM,
)
from cpython.long cimport PyLong_CheckExact, PyLong_FromSsize_t
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_CheckExact, PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.unicode cimport PyUnicode_CheckExact
from libc.math cimport isfinite
from libc.string cimport memcmp, memcpy

import builtins

import orjson

# Looked up once: no per-item module attribute lookups.
cdef object _dumps = orjson.dumps
cdef object _loads = orjson.loads
cdef object _JSONDecodeError = orjson.JSONDecodeError
cdef object _JSONEncodeError = orjson.JSONEncodeError
cdef object _range = builtins.range

cdef bytes _EMPTY_ARGS = b"[]"
cdef bytes _EMPTY_OBJECT = b"{}"
cdef bytes _EMPTY = b""
cdef bytes _P_KWARGS = b',{"k":'

# Lengths of the fixed pieces of an envelope, and their bytes.
cdef enum:
    _L_KWARGS = 6    # ,{"k":
    _L_EMPTY = 2     # [] or {}
cdef const char* _C_KWARGS = b',{"k":'
cdef const char* _C_BATCH = b',{"b":"'

# a decoded array's first three items
cdef str _K_NAME = "n"
cdef str _K_ARGS = "a"
cdef str _K_TIME = "t"
cdef str _K_KWARGS = "k"
cdef str _K_BATCH = "b"  # a job's batch, which the enqueue script writes
cdef tuple _POSITIONAL = ("n", "a", "t")
# the object of the format before (jobs queued across an upgrade still run)
cdef str _K_OLD_NAME = "name"
cdef str _K_OLD_ARGS = "args"
cdef str _K_OLD_KWARGS = "kwargs"
cdef str _K_ATTEMPTS = "attempts"


cdef extern from "Python.h":
    Py_ssize_t PyBytes_GET_SIZE(object o)


def envelope_tail(name, enqueued_at_ms, fields):
    """Encode what a batch shares: ``(head, mid, close, kw_close)``, the bytes before
    the args, between the args and the fields' object, and the two ways to end an
    envelope: without kwargs, and after ``,{"k":<kwargs>``. ``fields`` are those of
    the fields' object beside ``"k"`` (left out when empty)."""
    cdef bytes head = b"[" + _dumps(name) + b","
    cdef bytes mid = b"," + _dumps(enqueued_at_ms)
    cdef bytes body = _dumps(dict(fields))
    if body == _EMPTY_OBJECT:
        return (head, mid, b"]", b"}]")
    return (head, mid, b"," + body + b"]", b"," + body[1:] + b"]")


cdef enum:
    # orjson refuses to nest deeper ("Recursion limit reached"); past it, the walk
    # leaves the value to orjson, whose error is then the one raised (the reference's)
    _MAX_DEPTH = 255


cdef bint _is_plain(object value, int depth) noexcept:
    """The reference's ``is_plain``: only exact None, bool, int, finite float, str,
    and lists, tuples and dicts (exact str keys) of them. Type checks only: no
    Python code runs, so the containers cannot change under the walk."""
    cdef Py_ssize_t i, pos
    cdef PyObject* key
    cdef PyObject* item
    if PyUnicode_CheckExact(value) or PyLong_CheckExact(value) or value is None \
            or PyBool_Check(value):
        return True
    if PyFloat_CheckExact(value):
        return isfinite(PyFloat_AS_DOUBLE(value))
    if depth >= _MAX_DEPTH:
        return True
    if PyList_CheckExact(value):
        i = 0
        while i < PyList_GET_SIZE(value):
            if not _is_plain(<object>PyList_GET_ITEM(value, i), depth + 1):
                return False
            i += 1
        return True
    if PyTuple_CheckExact(value):
        for i in range(PyTuple_GET_SIZE(value)):
            if not _is_plain(<object>PyTuple_GET_ITEM(value, i), depth + 1):
                return False
        return True
    if PyDict_CheckExact(value):
        pos = 0
        while PyDict_Next(value, &pos, &key, &item):
            if not PyUnicode_CheckExact(<object>key) or not _is_plain(<object>item, depth + 1):
                return False
        return True
    return False


cdef bint _is_plain_call(object value) except -1:
    """The reference's ``_is_plain_call``: args or kwargs, whose own container type is
    orjson's to judge, and whose items must be plain."""
    cdef Py_ssize_t i, pos
    cdef PyObject* key
    cdef PyObject* item
    if PyTuple_CheckExact(value):
        for i in range(PyTuple_GET_SIZE(value)):
            if not _is_plain(<object>PyTuple_GET_ITEM(value, i), 1):
                return False
        return True
    if PyList_CheckExact(value):
        i = 0
        while i < PyList_GET_SIZE(value):
            if not _is_plain(<object>PyList_GET_ITEM(value, i), 1):
                return False
            i += 1
        return True
    if PyDict_CheckExact(value):
        pos = 0
        while PyDict_Next(value, &pos, &key, &item):
            if not PyUnicode_CheckExact(<object>key) or not _is_plain(<object>item, 1):
                return False
        return True
    # a subclass: iterated as the reference does
    if isinstance(value, dict):
        for k, v in value.items():
            if not PyUnicode_CheckExact(k) or not _is_plain(v, 1):
                return False
        return True
    if isinstance(value, (list, tuple)):
        for v in value:
            if not _is_plain(v, 1):
                return False
    return True


cdef int _refuse(object value, str what) except -1:
    """Raise the reference's TypeError naming where the value is. An error path, so
    the message is built by the reference itself: both codecs say the same."""
    from fastq._pyimpl.codec import refuse_unsendable

    refuse_unsendable(value, what)
    return 0


cdef object _dumps_call(object value, str what):
    """The reference's ``_dumps``: orjson's bytes of args or kwargs, after the check
    that they arrive as sent."""
    if not _is_plain_call(value):
        _refuse(value, what)
    try:
        return _dumps(value)
    except _JSONEncodeError:
        _refuse(value, what)  # an int beyond 64 bits, a lone surrogate
        raise


cdef inline bytes _splice(bytes head, const char* a, Py_ssize_t la, bytes mid,
                          const char* k, Py_ssize_t lk, bytes close):
    """``head <a> mid close``, or ``head <a> mid ,{"k":<k> close`` when ``k`` is not
    NULL (``close`` is then the tail's kw_close), in one allocation."""
    cdef Py_ssize_t lh = PyBytes_GET_SIZE(head)
    cdef Py_ssize_t lm = PyBytes_GET_SIZE(mid)
    cdef Py_ssize_t lc = PyBytes_GET_SIZE(close)
    cdef Py_ssize_t size = lh + la + lm + lc
    if k != NULL:
        size += _L_KWARGS + lk
    cdef bytes out = PyBytes_FromStringAndSize(NULL, size)
    cdef char* p = PyBytes_AS_STRING(out)
    memcpy(p, PyBytes_AS_STRING(head), lh)
    p += lh
    memcpy(p, a, la)
    p += la
    memcpy(p, PyBytes_AS_STRING(mid), lm)
    p += lm
    if k != NULL:
        memcpy(p, _C_KWARGS, _L_KWARGS)
        p += _L_KWARGS
        memcpy(p, k, lk)
        p += lk
    memcpy(p, PyBytes_AS_STRING(close), lc)
    return out


cdef inline bint _exact_tail(object tail):
    """A tail of four bytes objects (what envelope_tail returns): the fast path."""
    return (PyBytes_CheckExact(<object>PyTuple_GET_ITEM(tail, 0))
            and PyBytes_CheckExact(<object>PyTuple_GET_ITEM(tail, 1))
            and PyBytes_CheckExact(<object>PyTuple_GET_ITEM(tail, 2))
            and PyBytes_CheckExact(<object>PyTuple_GET_ITEM(tail, 3)))


cdef inline int _check_tail(object tail) except -1:
    if not PyTuple_CheckExact(tail) or len(tail) != 4:
        raise TypeError("tail must be the 4-tuple envelope_tail() returns")
    return 0


cdef inline bytes _encode(object args, object kwargs, object tail):
    # Same order as the reference: the tail's check, args, then kwargs, then join.
    _check_tail(tail)
    cdef object a = _dumps_call(args, "args") if args else _EMPTY_ARGS
    cdef object k = None
    if kwargs:
        k = _dumps_call(kwargs, "kwargs")
    if _exact_tail(tail) and PyBytes_CheckExact(a) and (k is None or PyBytes_CheckExact(k)):
        if k is None:
            return _splice(<bytes>tail[0], PyBytes_AS_STRING(a), PyBytes_GET_SIZE(a),
                           <bytes>tail[1], NULL, 0, <bytes>tail[2])
        return _splice(<bytes>tail[0], PyBytes_AS_STRING(a), PyBytes_GET_SIZE(a),
                       <bytes>tail[1], PyBytes_AS_STRING(k), PyBytes_GET_SIZE(k),
                       <bytes>tail[3])
    # Anything unusual (bytes-likes in the tail): the reference's own join, so errors
    # and results are the same.
    if k is None:
        return _EMPTY.join((tail[0], a, tail[1], tail[2]))
    return _EMPTY.join((tail[0], a, tail[1], _P_KWARGS, k, tail[3]))


def encode_envelope(args, kwargs, tail):
    """Encode one envelope: ``[name,<args>,t]``, with ``{"k":<kwargs>}`` (and the
    batch's fields) as a fourth item when kwargs is not empty.

    Raises:
        TypeError: args or kwargs hold what JSON cannot carry as it is (see
            the reference's ``find_unsendable``; the message says where); ``tail`` is not a tail.
    """
    return _encode(args, kwargs, tail)


cdef inline Py_ssize_t _element_end(const char* buf, Py_ssize_t pos, Py_ssize_t size) noexcept nogil:
    """End of the array element starting at ``buf[pos]`` in compact JSON (orjson output).

    Returns the index of the ``,`` or ``]`` closing it, or -1 if ``buf`` ends first.
    Tracks nesting and strings (with backslash escapes); UTF-8 continuation bytes
    are >= 0x80, so they never look like structure.
    """
    cdef int depth = 0
    cdef char c
    while pos < size:
        c = buf[pos]
        if c == b'"':
            pos += 1
            while pos < size:
                c = buf[pos]
                if c == b'\\':
                    pos += 2
                    continue
                if c == b'"':
                    break
                pos += 1
        elif c == b'[' or c == b'{':
            depth += 1
        elif c == b']' or c == b'}':
            if depth == 0:
                return pos
            depth -= 1
        elif c == b',' and depth == 0:
            return pos
        pos += 1
    return -1


cdef object _encode_calls_batched(object calls, tuple tail):
    """All calls in one orjson call, then the array split and spliced.

    Byte-identical to encoding call by call: orjson encodes an array element
    exactly as it encodes the same value alone. Only taken when every call is an
    exact list, tuple or dict. Returns None whenever anything is off (an encoding
    error, a surprise in the output); the caller then runs the call-by-call loop,
    which raises exactly as the reference does.
    """
    cdef Py_ssize_t n = len(calls)
    cdef Py_ssize_t i
    cdef object call
    for i in range(n):
        call = <object>(PyList_GET_ITEM(calls, i) if PyList_CheckExact(calls)
                        else PyTuple_GET_ITEM(calls, i))
        if not (PyList_CheckExact(call) or PyTuple_CheckExact(call) or PyDict_CheckExact(call)):
            return None
        # something that JSON cannot carry as it is: the call-by-call loop names it
        if not _is_plain_call(call):
            return None
    try:
        call_json = _dumps(calls)
    except Exception:
        return None
    if not PyBytes_CheckExact(call_json):
        return None
    cdef const char* cb = PyBytes_AS_STRING(call_json)
    cdef Py_ssize_t csize = PyBytes_GET_SIZE(call_json)
    cdef Py_ssize_t cpos = 1, cend, lc
    cdef bytes env
    cdef bytes head = <bytes>tail[0], mid = <bytes>tail[1]
    cdef bytes close = <bytes>tail[2], kw_close = <bytes>tail[3]
    cdef bint calls_is_list = PyList_CheckExact(calls)
    if csize < 2 or cb[0] != b'[':
        return None
    cdef list out = PyList_New(n)  # slots filled below; a dropped list frees them safely
    for i in range(n):
        cend = _element_end(cb, cpos, csize)
        if cend < 0:
            return None
        if calls_is_list and i >= PyList_GET_SIZE(calls):
            return None
        call = <object>(PyList_GET_ITEM(calls, i) if calls_is_list
                        else PyTuple_GET_ITEM(calls, i))
        lc = cend - cpos
        if not PyDict_CheckExact(call):
            env = _splice(head, cb + cpos, lc, mid, NULL, 0, close)
        elif lc == _L_EMPTY:  # {}: no kwargs, as the reference writes it
            env = _splice(head, b"[]", _L_EMPTY, mid, NULL, 0, close)
        else:
            env = _splice(head, b"[]", _L_EMPTY, mid, cb + cpos, lc, kw_close)
        Py_INCREF(env)
        PyList_SET_ITEM(out, i, env)
        cpos = cend + 1
    # the array must end exactly after the n-th element
    if cpos != csize:
        return None
    return out


cdef list _encode_calls_loop(object calls, object tail):
    """The reference loop: one envelope per call, errors named by call index."""
    cdef list out = []
    cdef Py_ssize_t i = 0
    cdef bint inside = False
    cdef object call
    try:
        for call in calls:
            inside = True
            if isinstance(call, (tuple, list)):
                out.append(_encode(call, None, tail))
            elif isinstance(call, dict):
                out.append(_encode(None, call, tail))
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


def encode_calls(calls, tail):
    """Encode one envelope per call of a blast.

    Each call is a tuple or list of positional arguments, or a dict of keyword
    arguments.

    Raises:
        TypeError: a call is neither, or holds something JSON cannot carry
            (NaN and infinities included); the message names the call's index.
    """
    cdef object out
    if (PyList_CheckExact(calls) or PyTuple_CheckExact(calls)) and PyTuple_CheckExact(tail) \
            and len(tail) == 4 and _exact_tail(tail) and len(calls) > 1:
        out = _encode_calls_batched(calls, <tuple>tail)
        if out is not None:
            return out
    return _encode_calls_loop(calls, tail)


cdef inline object _item(list reply, Py_ssize_t i):
    """``reply[i]`` for ``i >= 0``, re-checking the size (the list may have changed)."""
    if i < PyList_GET_SIZE(reply):
        return <object>PyList_GET_ITEM(reply, i)
    raise IndexError("list index out of range")



# -- the claim's fast path: a compact 3-item envelope of flat args, parsed here ---------

cdef enum:
    _MAX_INT_DIGITS = 18  # always fits a long long; longer: orjson's


cdef inline Py_ssize_t _string_end(const unsigned char* b, Py_ssize_t pos, Py_ssize_t size) noexcept nogil:
    """End (the closing quote) of the JSON string whose opening quote is ``b[pos - 1]``,
    or -1 for anything this path leaves to orjson (an escape, a control character)."""
    cdef unsigned char c
    while pos < size:
        c = b[pos]
        if c == b'"':
            return pos
        if c == b'\\' or c < 0x20:
            return -1
        pos += 1
    return -1


cdef inline Py_ssize_t _int_end(const unsigned char* b, Py_ssize_t pos, Py_ssize_t size) noexcept nogil:
    """End of the JSON integer at ``b[pos]`` (an optional minus, digits, no leading zero),
    or -1 for anything else (a float, an exponent, too many digits)."""
    cdef Py_ssize_t start
    if pos < size and b[pos] == b'-':
        pos += 1
    start = pos
    while pos < size and b'0' <= b[pos] <= b'9':
        pos += 1
    if pos == start or pos - start > _MAX_INT_DIGITS:
        return -1
    if b[start] == b'0' and pos - start > 1:
        return -1
    if pos < size and (b[pos] == b'.' or b[pos] == b'e' or b[pos] == b'E'):
        return -1
    return pos


cdef inline long long _int_at(const unsigned char* b, Py_ssize_t pos, Py_ssize_t end):
    cdef long long value = 0
    cdef bint negative = b[pos] == b'-'
    if negative:
        pos += 1
    while pos < end:
        value = value * 10 + (b[pos] - 48)
        pos += 1
    return -value if negative else value


cdef object _fast_args(const unsigned char* b, Py_ssize_t size, Py_ssize_t* name_end,
                       long long* t, Py_ssize_t* batch_at):
    """The args of a compact envelope ``["name",[...],t]`` whose args are a flat array
    of integers, plain strings, booleans and nulls (what most jobs carry), parsed
    without orjson; the name is ``b[2:name_end]`` and the enqueue time ``t``. A job of
    a batch, ``["name",[...],t,{"b":"<batch>"}]`` as the enqueue script writes it,
    too: its batch is ``b[batch_at:size - 3]`` (``batch_at`` 0: none). None when the
    envelope is anything else: orjson's then, so that results and errors stay the
    reference's."""
    cdef Py_ssize_t pos, end, at
    cdef object item
    cdef list args
    if size < 8 or b[0] != b'[' or b[1] != b'"' or b[size - 1] != b']':
        return None
    end = _string_end(b, 2, size)
    if end < 0 or end + 2 >= size or b[end + 1] != b',' or b[end + 2] != b'[':
        return None
    name_end[0] = end
    pos = end + 3
    args = []
    if pos < size and b[pos] == b']':
        pos += 1
    else:
        while True:
            if pos >= size:
                return None
            if b[pos] == b'"':
                end = _string_end(b, pos + 1, size)
                if end < 0:
                    return None
                try:
                    item = (<char*>b + pos + 1)[:end - pos - 1].decode("utf-8")
                except UnicodeDecodeError:
                    return None
                pos = end + 1
            elif b[pos] == b'-' or b'0' <= b[pos] <= b'9':
                end = _int_end(b, pos, size)
                if end < 0:
                    return None
                item = _int_at(b, pos, end)
                pos = end
            elif size - pos >= 4 and memcmp(b + pos, b"true", 4) == 0:
                item = True
                pos += 4
            elif size - pos >= 5 and memcmp(b + pos, b"false", 5) == 0:
                item = False
                pos += 5
            elif size - pos >= 4 and memcmp(b + pos, b"null", 4) == 0:
                item = None
                pos += 4
            else:
                return None
            args.append(item)
            if pos >= size:
                return None
            if b[pos] == b']':
                pos += 1
                break
            if b[pos] != b',':
                return None
            pos += 1
    # then ,<t>] to the end: the envelope's enqueue time, an integer; or ,<t>,{"b":"…"}]
    if pos >= size or b[pos] != b',':
        return None
    end = _int_end(b, pos + 1, size)
    if end < 0:
        return None
    batch_at[0] = 0
    if end != size - 1:
        # ,{"b":" then a plain string, closed by "}] at the very end
        if size - end < 11 or memcmp(b + end, _C_BATCH, 7) != 0:
            return None
        if _string_end(b, end + 7, size) != size - 3 or b[size - 2] != b'}':
            return None
        for at in range(end + 7, size - 3):
            if b[at] >= 0x80:  # not the ASCII the script writes: orjson's
                return None
        batch_at[0] = end + 7
    t[0] = _int_at(b, pos + 1, end)
    return args


cdef inline object _lookup(object registry, bint reg_is_dict, str name):
    cdef PyObject* found
    if reg_is_dict:
        found = PyDict_GetItemWithError(registry, name)
        return <object>found if found is not NULL else None
    return registry.get(name)


cdef tuple _decode_list(list reply, Py_ssize_t start, object registry, object batched):
    cdef list runnable = []
    cdef list broken = []
    cdef list unknown = []
    cdef Py_ssize_t stop = PyList_GET_SIZE(reply) - 1
    cdef Py_ssize_t i = start
    cdef Py_ssize_t n
    cdef bint reg_is_dict = PyDict_CheckExact(registry)
    cdef bint is_array
    cdef PyObject* found
    cdef object job_id, raw, env, name, target, args, kwargs, failed, more
    cdef const unsigned char* rb
    cdef const unsigned char* last_at = NULL
    cdef Py_ssize_t name_end = 0, last_len = -1, batch_at = 0, size
    cdef long long t = 0
    cdef object bid, last_bid = None, last_bid_raw = None
    cdef const unsigned char* last_bid_at = NULL
    cdef Py_ssize_t last_bid_len = -1
    cdef dict env_fields
    cdef object last_name = None, last_target = None, last_raw = None
    cdef dict fields
    while i < stop:
        job_id = _item(reply, i)
        raw = _item(reply, i + 1)
        if PyBytes_CheckExact(raw):
            rb = <const unsigned char*>PyBytes_AS_STRING(raw)
            size = PyBytes_GET_SIZE(raw)
            args = _fast_args(rb, size, &name_end, &t, &batch_at)
            if args is not None:
                i += 2
                # a batch is mostly one job: its name decoded and looked up once
                if name_end - 2 != last_len or memcmp(rb + 2, last_at, last_len) != 0:
                    try:
                        name = (<char*>rb + 2)[:name_end - 2].decode("utf-8")
                    except UnicodeDecodeError:
                        name = None
                    if name is None:
                        last_len = -1
                    else:
                        last_name, last_target = name, _lookup(registry, reg_is_dict, name)
                        last_raw, last_at, last_len = raw, rb + 2, name_end - 2
                if last_len >= 0:
                    env_fields = {_K_NAME: last_name, _K_ARGS: args, _K_TIME: t}
                    if batch_at:
                        # a claim is mostly one batch: its id decoded once
                        if size - 3 - batch_at != last_bid_len or memcmp(
                                rb + batch_at, last_bid_at, last_bid_len) != 0:
                            last_bid = (<char*>rb + batch_at)[:size - 3 - batch_at].decode("ascii")
                            last_bid_raw, last_bid_at = raw, rb + batch_at
                            last_bid_len = size - 3 - batch_at
                        bid = last_bid
                        env_fields[_K_BATCH] = bid
                        if batched is not None:
                            batched[job_id] = bid
                    if last_target is None:
                        unknown.append((job_id, last_name, env_fields))
                    else:
                        runnable.append((job_id, last_target, args, {},  1, env_fields))
                    continue
                i -= 2  # a name that is not UTF-8: orjson's error
        try:
            env = _loads(raw)
        except _JSONDecodeError as exc:
            broken.append((job_id, f"invalid JSON: {exc}"))
            i += 2
            continue
        i += 2
        more = None
        is_array = PyList_CheckExact(env)
        if is_array:
            n = PyList_GET_SIZE(env)
            if n != 3 and n != 4:
                broken.append((job_id, f"envelope array has {n} items, not 3 or 4"))
                continue
            if n == 4:
                more = <object>PyList_GET_ITEM(env, 3)
                if not PyDict_CheckExact(more):
                    broken.append(
                        (job_id, f"envelope item 4 must be a JSON object, not {type(more).__name__}")
                    )
                    continue
            name = <object>PyList_GET_ITEM(env, 0)
            args = <object>PyList_GET_ITEM(env, 1)
            found = PyDict_GetItem(more, _K_KWARGS) if more is not None else NULL
            kwargs = <object>found if found is not NULL else {}
        elif PyDict_CheckExact(env):  # the format before
            found = PyDict_GetItem(env, _K_OLD_NAME)
            name = <object>found if found is not NULL else None
            found = PyDict_GetItem(env, _K_OLD_ARGS)
            args = <object>found if found is not NULL else []
            found = PyDict_GetItem(env, _K_OLD_KWARGS)
            kwargs = <object>found if found is not NULL else {}
        else:
            broken.append(
                (job_id, f"envelope is a JSON {type(env).__name__}, not an array or object")
            )
            continue
        target = _lookup(registry, reg_is_dict, name) if PyUnicode_CheckExact(name) else None
        if target is None and not PyUnicode_CheckExact(name):
            broken.append((job_id, f"unknown job name {name!r}"))
            continue
        if not PyList_CheckExact(args):
            broken.append((job_id, f"args must be a JSON array, not {type(args).__name__}"))
            continue
        if not PyDict_CheckExact(kwargs):
            broken.append((job_id, f"kwargs must be a JSON object, not {type(kwargs).__name__}"))
            continue
        if is_array:
            fields = {_K_NAME: name, _K_ARGS: args, _K_TIME: <object>PyList_GET_ITEM(env, 2)}
            if more is not None:
                fields.update(<dict>more)
                found = PyDict_GetItem(more, _K_BATCH)
                if found is not NULL and batched is not None and PyUnicode_CheckExact(<object>found):
                    batched[job_id] = <object>found
            env = fields
        if target is None:
            unknown.append((job_id, name, env))
            continue
        found = PyDict_GetItem(env, _K_ATTEMPTS)
        if found is NULL:
            runnable.append((job_id, target, args, kwargs, 1, env))
        else:
            failed = <object>found
            if not PyLong_CheckExact(failed) or failed < 0:
                failed = 0
            runnable.append((job_id, target, args, kwargs, failed + 1, env))
    return runnable, broken, unknown


def decode_claim(reply, start, registry, batched=None):
    """Decode the jobs of a claim reply.

    ``reply[start:]`` holds pairs ``id, envelope`` (bytes, bytes). The attempt
    number is one more than the failed attempts the envelope records.

    Returns ``(runnable, broken, unknown)``: runnable is a list of
    ``(id, registry[name], args, kwargs, attempt, envelope_dict)``; broken a list
    of ``(id, reason)`` for payloads that are not JSON objects, whose name is not
    a string, or that carry args/kwargs of the wrong type; unknown a list of
    ``(id, name, envelope_dict)`` for well-formed envelopes whose name (a string)
    ``registry`` lacks: a job of a newer deploy, perhaps (fastq.worker.unknown).
    ``batched``: a dict that learns the batch of each job in one (id -> batch id,
    its envelope's ``b``), for the ack to count them by.
    """
    if not PyList_CheckExact(reply):
        reply = list(reply)
    if start < 0:
        raise ValueError(f"start must be >= 0, not {start}")
    return _decode_list(<list>reply, start, registry, batched)


def update_envelope(env, fields):
    """Set ``fields`` in the decoded envelope ``env`` (in place) and encode it in its
    format: the one way an envelope read back from Redis is written again (after a
    failure)."""
    env.update(fields)
    if _K_NAME not in env:  # the object of the format before stays one
        return _dumps(env)
    more = {key: value for key, value in env.items() if key not in _POSITIONAL}
    if more:
        return _dumps([env[_K_NAME], env.get(_K_ARGS, []), env.get(_K_TIME), more])
    return _dumps([env[_K_NAME], env.get(_K_ARGS, []), env.get(_K_TIME)])


def first_misfit(calls, Py_ssize_t low, Py_ssize_t high, Py_ssize_t start):
    """Index of the first call from ``start`` on that is not a tuple or list (exactly)
    of ``low`` to ``high`` positional arguments: the next one a producer checks
    against the job's signature. ``len(calls)`` if none."""
    cdef Py_ssize_t i, n, size
    cdef object call
    if not PyList_CheckExact(calls):
        calls = list(calls)
    n = PyList_GET_SIZE(calls)
    if start < 0:
        start = 0
    for i in range(start, n):
        call = <object>PyList_GET_ITEM(calls, i)
        if PyTuple_CheckExact(call):
            size = PyTuple_GET_SIZE(call)
        elif PyList_CheckExact(call):
            size = PyList_GET_SIZE(call)
        else:
            return i
        if size < low or size > high:
            return i
    return n


cdef bytes _COMMA = b","


def encode_runs(ids, runs):
    """As :func:`fastq._pyimpl.codec.encode_runs`."""
    if not runs:
        return _EMPTY
    cdef list parts = []
    cdef PyObject* found
    cdef object run
    cdef bint exact = PyDict_CheckExact(runs)
    for job_id in ids:
        if exact:
            found = PyDict_GetItem(runs, job_id)
            run = None if found is NULL else <object>found
        else:
            run = runs.get(job_id)
        if run is None:
            parts.append(_EMPTY)
        elif type(run) is tuple:
            parts.append(f"{run[0]}:{run[1]}".encode())
        else:
            parts.append(f"{run}".encode())
    return _COMMA.join(parts)
