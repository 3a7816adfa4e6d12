"""An enqueue request (``POST /api/v1/queues/{queue}/jobs``): its jobs read, checked
and sent.

An enqueue over HTTP takes the path a Python producer takes: every job is made
into :class:`fastq.options.EnqueueOptions` and prepared by the producer,
each run of jobs of one name and the same options as one blast
(``Producer.prepare_many``, as ``enqueue_many`` prepares its calls: checked against
the app's registered function when it has one, given ids, encoded and held to the
payload limit), all before the first is sent, so that a request with one bad job
writes nothing; then each run is sent (``Producer.send``: chunks of 1,000 jobs a
script call, one round trip). Each job is checked and encoded once; a run that
``prepare_many`` refuses is prepared again job by job, so that the error names the
job at fault.
Jobs that name a ``batch`` (one for the whole request) join it, as enqueue calls
inside ``with app.batch(...)`` do.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any, Optional

import orjson

from fastq.app import App
from fastq.errors import EnqueueError, EnqueueInterrupted
from fastq.options import EnqueueOptions
from fastq.producer.batches import Batch
from fastq.producer.enqueue import Prepared
from fastq.serve.api.endpoint import NO_BODY, json_type, refusal
from fastq.serve.reply import HTTPError
from fastq.validate import check_job_id, check_queue_name

# jobs in one request at most; the body's bound (8 MiB) usually comes first
MAX_JOBS_PER_REQUEST = 10_000

# a job object's fields: its call, and each enqueue option JSON can carry, by the
# name of the EnqueueOptions field it sets
CALL_FIELDS = ("name", "args", "kwargs")
OPTION_FIELDS = {
    "id": "job_id",
    "priority": "priority",
    "delay_s": "delay_s",
    "at": "at",
    "tags": "tags",
    "unique_for_s": "unique_for_s",
    "unique_key": "unique_key",
    "unique_until": "unique_until",
    "retries": "retries",
    "age_limit_s": "age_limit_s",
    "shard_key": "shard_key",
    "group": "group",
}
# the batch the job joins (``app.batch``): one for every job of a request, or none
BATCH_FIELD = "batch"
JOB_FIELDS = (*CALL_FIELDS, *OPTION_FIELDS, BATCH_FIELD)


@dataclasses.dataclass(frozen=True)
class JobCall:
    """One job of a request, checked: its call and options (``job_id`` apart)."""

    name: str
    args: list[Any]
    kwargs: dict[str, Any]
    options: EnqueueOptions
    job_id: Optional[str]
    options_key: Optional[bytes] = None  # the options' JSON: equal for equal options
    batch: Optional[str] = None  # the batch it joins

    def call(self) -> Any:
        """The call as ``enqueue_many`` takes one (its arguments, or its keyword
        arguments), or None when it has both."""
        if not self.kwargs:
            return self.args
        return None if self.args else self.kwargs

    def batch_key(self) -> tuple[Any, ...]:
        """Jobs of equal keys are sent as one blast: one name, the same options, ids
        given for all or none."""
        same = self.options_key if self.options_key is not None else self.options
        return (self.name, same, self.job_id is not None)


@dataclasses.dataclass(frozen=True)
class Checked:
    """The jobs of a request, checked: each run of alike jobs prepared as one blast."""

    runs: list[Prepared]
    total: int
    batch: Optional[str]  # the batch every job joins, or None


def parse_at(value: Any, where: str) -> Any:
    """``at``: Unix seconds, or an ISO 8601 time with its offset (``Z`` or ``+02:00``)."""
    if not isinstance(value, str):
        return value  # a number, or what EnqueueOptions refuses with its message
    text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise HTTPError(
            422,
            f"{where}at: {value!r} is not Unix seconds nor an ISO 8601 time "
            "such as 2026-12-01T09:00:00Z",
        ) from None
    if when.tzinfo is None:
        raise HTTPError(
            422,
            f"{where}at: {value!r} has no UTC offset, so it names no instant: "
            "end it with Z or +HH:MM",
        )
    return when


def parse_job(item: Any, queue: str, where: str, made: dict[bytes, EnqueueOptions]) -> JobCall:
    """One job object, its options made (and so checked); ``made``: the options made
    already for this request, by their JSON (most jobs of a batch share theirs).

    Raises:
        HTTPError: 422 naming the field at fault.
    """
    if not isinstance(item, dict):
        what = where.rstrip(".") or "the body"
        raise HTTPError(422, f"{what} must be a job object, not {json_type(item)}")
    given: dict[str, Any] = {}
    for key, value in item.items():
        if key in CALL_FIELDS or key == BATCH_FIELD:
            continue
        field = OPTION_FIELDS.get(key)
        if field is None:
            fields = ", ".join(JOB_FIELDS)
            raise HTTPError(422, f"{where}{key}: unknown field (a job's fields: {fields})")
        if value is not None:
            given[field] = value
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise HTTPError(422, f"{where}name: the job's name must be a non-empty string")
    args = item.get("args")
    args = [] if args is None else args
    if not isinstance(args, list):
        raise HTTPError(422, f"{where}args: must be an array, not {json_type(args)}")
    kwargs = item.get("kwargs")
    kwargs = {} if kwargs is None else kwargs
    if not isinstance(kwargs, dict):
        raise HTTPError(422, f"{where}kwargs: must be an object, not {json_type(kwargs)}")
    job_id = given.pop("job_id", None)
    batch = item.get(BATCH_FIELD)
    if batch is not None:
        try:
            check_batch_id(batch)
        except (TypeError, ValueError) as exc:
            raise HTTPError(422, f"{where}batch: {exc}") from None
    try:
        if job_id is not None:
            check_job_id(job_id)
        key = _options_key(given)
        options = made.get(key) if key is not None else None
        if options is None:
            if "at" in given:
                given["at"] = parse_at(given["at"], where)
            options = EnqueueOptions(queue=queue, **given)
            if key is not None:
                made[key] = options
    except (TypeError, ValueError) as exc:
        raise HTTPError(422, f"{where.rstrip('.') or 'the job'}: {exc}") from None
    return JobCall(name, args, kwargs, options, job_id, key, batch)


def check_batch_id(batch_id: Any) -> str:
    """A batch id as ``app.batch(id=...)`` takes it: a job id without ``{`` or ``}``.

    Raises:
        TypeError, ValueError: it is not one.
    """
    if not isinstance(batch_id, str):
        raise TypeError(f"a batch id must be a str, not {type(batch_id).__name__}")
    try:
        check_job_id(batch_id)
    except ValueError as exc:
        raise ValueError(str(exc).replace("job_id", "batch id")) from None
    if "{" in batch_id or "}" in batch_id:
        raise ValueError(f"a batch id holds no '{{' nor '}}': {batch_id!r}")
    return batch_id


def _options_key(given: dict[str, Any]) -> Optional[bytes]:
    """The JSON of a job's options, by which equal ones are made once (and runs of
    alike jobs found); None for what orjson cannot write (made every time)."""
    if not given:
        return b""
    try:
        return orjson.dumps(given, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return None


def parse_jobs(app: App, body: Any, queue: str) -> Checked:
    """The jobs of an enqueue request, each checked as ``app`` would check it before
    sending (options, the registered function's parameters, JSON, size).

    Raises:
        HTTPError: 400 (not a job or a list), 422 (a job at fault, named, or too
            many jobs).
    """
    try:
        check_queue_name(queue)
    except (TypeError, ValueError) as exc:
        raise HTTPError(422, str(exc)) from None
    if body is NO_BODY:
        raise HTTPError(400, "no body: send a job object, or an array of them")
    if isinstance(body, dict):
        items, one = [body], True
    elif isinstance(body, list):
        items, one = body, False
    else:
        raise HTTPError(
            400, f"the body must be a job object or an array of them, not {json_type(body)}"
        )
    if not items:
        raise HTTPError(422, "an empty array: no job to enqueue")
    if len(items) > MAX_JOBS_PER_REQUEST:
        raise HTTPError(
            422,
            f"{len(items):,} jobs in one request, more than {MAX_JOBS_PER_REQUEST:,}: "
            "send them in several requests",
        )
    jobs: list[JobCall] = []
    seen: dict[str, int] = {}
    made: dict[bytes, EnqueueOptions] = {}
    for i, item in enumerate(items):
        where = "" if one else f"jobs[{i}]."
        job = parse_job(item, queue, where, made)
        if job.job_id is not None:
            if job.job_id in seen:
                raise HTTPError(
                    422, f"{where}id: {job.job_id!r} is also jobs[{seen[job.job_id]}]'s"
                )
            seen[job.job_id] = i
        if jobs and job.batch != jobs[0].batch:
            raise HTTPError(
                422,
                f"{where}batch: every job of a request joins one batch (jobs[0]'s: "
                f"{jobs[0].batch!r}), or none",
            )
        jobs.append(job)
    prepared, at = [], 0
    for run in runs(jobs):
        prepared.append(_prepared_run(app, run, at, one))
        at += len(run)
    return Checked(prepared, len(jobs), jobs[0].batch)


def _prepared_run(app: App, run: list[JobCall], at: int, one: bool) -> Prepared:
    """A run of alike jobs (:func:`runs`; the first is the request's job ``at``)
    checked, given ids and encoded as one blast, as ``enqueue_many`` prepares its
    calls; job by job where ``prepare_many`` cannot take them (a single job, a call
    with both args and kwargs) or refuses them (to name the job at fault).

    Raises:
        HTTPError: 422, naming the job, for what the producer refuses.
    """
    calls = [job.call() for job in run]
    if len(run) > 1 and None not in calls:
        first = run[0]
        ids = [job.job_id for job in run] if first.job_id is not None else None
        try:
            return app.producer.prepare_many(first.name, calls, first.options, ids)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            pass  # prepared one by one below: the job at fault named
    return Prepared.joined(
        [_prepared(app, job, "" if one else f"jobs[{at + i}].") for i, job in enumerate(run)]
    )


def _prepared(app: App, job: JobCall, where: str) -> Prepared:
    """``job`` checked, given its id and encoded by the producer, as an enqueue in
    Python is before it sends anything.

    Raises:
        HTTPError: 422, naming the job, for what the producer refuses.
    """
    options = dataclasses.replace(job.options, job_id=job.job_id)
    try:
        return app.producer.prepare(job.name, job.args, job.kwargs, options)
    except (TypeError, ValueError) as exc:
        raise HTTPError(422, f"{where.rstrip('.') or 'the job'}: {exc}") from None


def runs(jobs: list[JobCall]) -> list[list[JobCall]]:
    """The jobs in runs that one blast can take: one name, the same options, ids
    given for all or none."""
    out: list[list[JobCall]] = []
    for job in jobs:
        if out and out[-1][0].batch_key() == job.batch_key():
            out[-1].append(job)
            continue
        out.append([job])
    return out


def send(app: App, jobs: Checked) -> list[str]:
    """Enqueue checked jobs, a run (:func:`runs`) a blast; their ids in order (of a
    unique job refused by a held lock: the holder's).

    Raises:
        HTTPError: 503 with ``written``, the ids that went in, when Redis took only
            some (or could not be reached); what :func:`refusal` maps otherwise.
    """
    if jobs.batch is not None:
        # the enqueue calls made inside the block join the batch (a contextvar, set
        # and reset in this thread of the pool, by this request alone). Not
        # app.batch(id=...): that opens a batch of an id it does not find, and a
        # mistyped id would open one that nothing ever closes; a Batch's join
        # refuses it (BatchClosed: a 409)
        with Batch(app.batch_book, jobs.batch, close=False):
            return _send(app, jobs)
    return _send(app, jobs)


def _send(app: App, jobs: Checked) -> list[str]:
    ids: list[str] = []
    for run in jobs.runs:
        try:
            ids += app.producer.send(run)
        except EnqueueError as exc:
            raise _unsent(exc, ids + list(exc.written), jobs.total) from exc
        except Exception as exc:
            mapped = refusal(exc)
            if mapped is None:
                raise
            if ids:  # not bad input (it was all checked): something of Redis'
                mapped.more["written"] = list(ids)
            raise mapped from exc
    return ids


def _unsent(exc: EnqueueError, written: list[str], total: int) -> HTTPError:
    """The 503 of a request Redis took only part of: which ids are in, and how to
    finish (the Python advice of ``exc``'s message, ``job_ids=``, is not HTTP's)."""
    cause = exc.__cause__ or exc
    if isinstance(exc, EnqueueInterrupted):
        what = f"Redis could not be reached ({cause}): {len(written)} of the {total} jobs "
        what += "are in (written), the others may or may not be"
    else:
        what = f"Redis refused the jobs ({exc.fault}: {cause}): {len(written)} of the "
        what += f"{total} jobs are in (written), the others are not"
    return HTTPError(
        503,
        f"{what}; send the request again with an id for each job: an id that is in "
        "already adds nothing",
        written=written,
    )
