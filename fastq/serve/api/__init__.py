"""The JSON API of ``fastq serve``, mounted at ``/api/v1``: the producers' routes
(:mod:`~fastq.serve.api.producers`: enqueue, read and cancel a job, the queues'
stats, pause, resume, rate limit), the batches' (:mod:`~fastq.serve.api.batches`)
and the HTTP workers' (:mod:`~fastq.serve.api.workers`: claim, heartbeat, done,
fail; what they do in Redis is :mod:`~fastq.serve.api.claims`'), each written the
one way :mod:`~fastq.serve.api.endpoint` says, and the OpenAPI document of them
all (:mod:`~fastq.serve.api.openapi`).
"""
