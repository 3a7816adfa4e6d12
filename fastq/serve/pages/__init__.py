"""The dashboard's pages at ``/`` of ``fastq serve``: server-rendered (Jinja2),
live through htmx, which polls each page's fragment every few seconds; the charts
are uPlot's, fed by ``/_/history``.

:mod:`~fastq.serve.pages.routes` is their table; :mod:`~fastq.serve.pages.handler`
serves each (the session, the CSRF token, the template); the views are by what
they show (:mod:`~fastq.serve.pages.queues`, :mod:`~fastq.serve.pages.jobs`,
:mod:`~fastq.serve.pages.batches`, :mod:`~fastq.serve.pages.workers`,
:mod:`~fastq.serve.pages.login`), over the view models of
:mod:`~fastq.serve.pages.models`.
"""
