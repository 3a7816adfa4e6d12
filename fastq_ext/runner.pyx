# cython: language_level=3
"""The sync runner's per-job loop, native port of :mod:`fastq._pyimpl.runner`.

Same arguments, same results, same calls in the same order as the reference. What
is native: the loop, the tuple unpacking, the plain-job check (cached per job
definition, and for the definition of the job before), and the heartbeat slot's
``start_job`` and ``finished``, written straight into the shared mmap (the same
bytes :class:`fastq.shm.heartbeat.HeartbeatSlot` writes: the master reads them).
"""

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.dict cimport PyDict_CheckExact, PyDict_GetItem, PyDict_SetItem
from cpython.list cimport PyList_AsTuple, PyList_CheckExact, PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject, PyObject_Call
from cpython.tuple cimport PyTuple_CheckExact, PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.stdint cimport uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

# the slot's layout (fastq.shm.heartbeat: "dddIId" then the id): what start_job writes
cdef enum:
    _STARTED_AT = 8
    _DEADLINE_AT = 16
    _QUEUE_AT = 24
    _ID_LEN_AT = 28
    _ID_AT = 40
    _SLOT_SIZE = 256
    _MAX_ID = _SLOT_SIZE - _ID_AT
cdef uint32_t _UNKNOWN_ID = 0xFFFFFFFF

# the ring of finished jobs (fastq.shm.heartbeat: header "QQ", entries "HH" then the id)
cdef enum:
    _RING_HEADER = 16
    _ENTRY_SIZE = 64
    _ENTRY_ID_AT = 4
    _MAX_ENTRY_ID = _ENTRY_SIZE - _ENTRY_ID_AT


cdef inline double _monotonic() noexcept nogil:
    # time.monotonic() is CLOCK_MONOTONIC on Linux: the master compares with it
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <double>ts.tv_sec + <double>ts.tv_nsec * 1e-9


cdef inline void _start_job(char* slot, uint32_t queue_index, bytes job_id) noexcept:
    """HeartbeatSlot.start_job(queue_index, job_id, None): started now, no deadline."""
    cdef double now = _monotonic()
    cdef double deadline = 0.0
    cdef Py_ssize_t n = len(job_id)
    cdef uint32_t stored
    if n > _MAX_ID:
        stored = _UNKNOWN_ID
    else:
        memcpy(slot + _ID_AT, <char*>job_id, n)
        stored = <uint32_t>n
    memcpy(slot + _STARTED_AT, &now, 8)
    memcpy(slot + _DEADLINE_AT, &deadline, 8)
    memcpy(slot + _QUEUE_AT, &queue_index, 4)
    memcpy(slot + _ID_LEN_AT, &stored, 4)


cdef inline void _finished(char* ring, Py_ssize_t size, uint16_t queue_index,
                           bytes job_id) noexcept:
    """HeartbeatSlot.finished(queue_index, job_id): the entry, then the count."""
    cdef uint64_t noted
    cdef Py_ssize_t n = len(job_id)
    cdef uint16_t stored
    cdef char* at
    if n > _MAX_ENTRY_ID:
        return
    memcpy(&noted, ring, 8)
    at = ring + _RING_HEADER + <Py_ssize_t>(noted % <uint64_t>size) * _ENTRY_SIZE
    stored = <uint16_t>n
    memcpy(at, &queue_index, 2)
    memcpy(at + 2, &stored, 2)
    memcpy(at + _ENTRY_ID_AT, <char*>job_id, n)
    noted += 1
    memcpy(ring, &noted, 8)


def run_jobs(list runnable, out, owner, cursor, slot, str queue, Py_ssize_t queue_index,
             dict plain, plain_of, run_other, settle, tuple failures, tuple outcomes):
    """As :func:`fastq._pyimpl.runner.run_jobs`."""
    cdef object done = out.done.append
    cdef dict runs = out.runs
    cdef double started
    cdef long long run_ms
    cdef object attempt
    cdef object last = None
    cdef bint last_plain = False
    cdef Py_ssize_t i, n = PyList_GET_SIZE(runnable)
    cdef object job, job_id, target, args, kwargs, result, known
    cdef PyObject* found
    cdef Py_buffer view
    cdef char* slot_at = NULL
    cdef char* ring_at = NULL
    cdef Py_ssize_t offset, ring_offset, ring_size = 0
    if slot is not None:
        offset = slot._offset
        ring_offset = slot.ring_at
        ring_size = slot.ring_size
        PyObject_GetBuffer(slot._buf, &view, PyBUF_WRITABLE)
        if (offset < 0 or offset + _SLOT_SIZE > view.len or ring_size < 0 or (
                ring_size and ring_offset + _RING_HEADER + ring_size * _ENTRY_SIZE > view.len)):
            PyBuffer_Release(&view)
            raise ValueError(f"heartbeat slot at {offset} outside its board")
        slot_at = <char*>view.buf + offset
        if ring_size:
            ring_at = <char*>view.buf + ring_offset
    try:
        for i in range(n):
            cursor.index = i
            if owner.stopping:
                return i
            if i >= PyList_GET_SIZE(runnable):  # a job's own doing: the list shrank
                return i
            job = <object>PyList_GET_ITEM(runnable, i)
            if not PyTuple_CheckExact(job) or PyTuple_GET_SIZE(job) != 6:
                raise ValueError(f"a runnable job is a 6-tuple, not {job!r}")
            target = <object>PyTuple_GET_ITEM(job, 1)
            if target is not last:
                found = PyDict_GetItem(plain, target)
                if found is NULL:
                    known = plain_of(target)
                    PyDict_SetItem(plain, target, known)
                else:
                    known = <object>found
                last, last_plain = target, bool(known)
            if not last_plain:
                run_other(out, queue, queue_index, job)
                continue
            job_id = <object>PyTuple_GET_ITEM(job, 0)
            args = <object>PyTuple_GET_ITEM(job, 2)
            kwargs = <object>PyTuple_GET_ITEM(job, 3)
            if slot_at != NULL:
                if type(job_id) is bytes:
                    _start_job(slot_at, <uint32_t>queue_index, <bytes>job_id)
                else:
                    slot.start_job(queue_index, job_id, None)
            started = _monotonic()
            try:
                if PyList_CheckExact(args) and PyDict_CheckExact(kwargs):
                    result = PyObject_Call(target.fn, PyList_AsTuple(args), kwargs)
                else:
                    result = target.fn(*args, **kwargs)
            except failures as exc:
                settle(out, job_id, target, args, kwargs, <object>PyTuple_GET_ITEM(job, 4),
                       <object>PyTuple_GET_ITEM(job, 5), exc)
                continue
            if result is None or not isinstance(result, outcomes):
                # out.note_done(), inline: the run (whole ms) and attempt, if not 0 and 1
                run_ms = <long long>((_monotonic() - started) * 1000.0)
                attempt = <object>PyTuple_GET_ITEM(job, 4)
                if attempt != 1:
                    runs[job_id] = (run_ms, attempt)
                elif run_ms > 0:
                    runs[job_id] = run_ms
                done(job_id)
                if ring_at != NULL and type(job_id) is bytes:
                    _finished(ring_at, ring_size, <uint16_t>queue_index, <bytes>job_id)
            else:
                settle(out, job_id, target, args, kwargs, <object>PyTuple_GET_ITEM(job, 4),
                       <object>PyTuple_GET_ITEM(job, 5), result)
        return n
    finally:
        if slot_at != NULL:
            PyBuffer_Release(&view)


def hand_back_rest(cursor, Py_ssize_t index):
    """As :func:`fastq._pyimpl.runner.hand_back_rest`; atomic under the GIL (no
    Python code runs between the check and the cut), so the loop either has not
    reached the next job (and never will) or has, and nothing is cut."""
    cdef object runnable = cursor.runnable
    if not PyList_CheckExact(runnable) or cursor.index != index:
        return []
    if PyList_GET_SIZE(runnable) <= index + 1:
        return []
    rest = runnable[index + 1:]
    del runnable[index + 1:]
    return rest
