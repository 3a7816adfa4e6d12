"""Builds the Cython kernels of fastq_ext. All build switches are read here."""

import os

from Cython.Build import cythonize
from setuptools import Extension, setup

# FASTQ_CYTHON_TRACE=1 builds with line tracing for coverage/profiling.
trace = os.environ.get("FASTQ_CYTHON_TRACE") == "1"
macros = [("CYTHON_TRACE_NOGIL", "1")] if trace else []

# each kernel compiled on a core of its own (four modules; gcc -O2 takes most of a
# fresh install's time)
jobs = os.cpu_count() or 1

extensions = [
    Extension(f"fastq_ext.{name}", [f"fastq_ext/{name}.pyx"], define_macros=macros)
    for name in ("codec", "backoff", "runner", "ids")
]

setup(
    ext_modules=cythonize(
        extensions,
        nthreads=jobs,
        language_level=3,
        compiler_directives={
            "boundscheck": False,
            "wraparound": False,
            "linetrace": trace,
        },
    ),
    options={"build_ext": {"parallel": jobs}},
)
