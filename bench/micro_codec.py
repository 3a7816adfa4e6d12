"""Micro-benchmark: the pure-Python reference kernels against the compiled ones.

Run from a source checkout after ``python setup.py build_ext --inplace``::

    python -m bench.micro_codec                 # full sizes
    python -m bench.micro_codec --quick         # tiny sizes, a CI smoke test (< 2 s)
    python -m bench.micro_codec --json out.json

Prints one line per kernel: ``kernel  reference_us_per_item  native_us_per_item
speedup`` (best of several repeats, ``time.perf_counter``; the two implementations
take turns, with the cyclic GC paused while timing, as :mod:`timeit` does).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import platform
import random
import sys
import time
import uuid
from types import ModuleType
from typing import Any, Callable

from bench.harness import add_json_option, write_report

# the retry policies' kernels, each with the arguments after ``attempt`` (and ``rand``
# last where the curve has one): a default-like setting of each policy
POLICIES: dict[str, tuple[tuple[Any, ...], bool]] = {
    "backoff_ms": ((100, 60_000, 0.5), True),  # exponential
    "polynomial_ms": ((315_360_000_000,), True),
    "doubling_ms": ((100, 3_600_000, 16), False),
    "geometric_ms": ((1000, 1.5, 3_600_000), False),
    "listed_ms": (((1000, 10_000, 60_000, 600_000),), False),
}
FULL = {"encode_calls": 10_000, "decode_claim": 500, **{k: 100_000 for k in POLICIES}}
QUICK = {"encode_calls": 500, "decode_claim": 50, **{k: 5_000 for k in POLICIES}}


def _modules() -> tuple[ModuleType, ModuleType, ModuleType, ModuleType]:
    """(reference codec, native codec, reference backoff, native backoff)."""
    from fastq._pyimpl import backoff as ref_backoff
    from fastq._pyimpl import codec as ref_codec
    from fastq_ext import backoff as nat_backoff
    from fastq_ext import codec as nat_codec

    return ref_codec, nat_codec, ref_backoff, nat_backoff


def best_seconds(fns: list[Callable[[], Any]], repeats: int, number: int) -> list[float]:
    """Best time per call of each fn: ``repeats`` runs of ``number`` back-to-back calls.

    The fns take turns run by run, so a change in machine load hits all of them.
    As in :mod:`timeit`, the cyclic GC is off while timing (collected before each run),
    so a collection that happens to fall in one run does not decide the result.
    """
    best = [float("inf")] * len(fns)
    gc_was_enabled = gc.isenabled()
    try:
        for _ in range(repeats):
            for k, fn in enumerate(fns):
                gc.collect()
                gc.disable()
                start = time.perf_counter()
                for _ in range(number):
                    fn()
                elapsed = time.perf_counter() - start
                if gc_was_enabled:
                    gc.enable()
                best[k] = min(best[k], elapsed / number)
    finally:
        if gc_was_enabled:
            gc.enable()
    return best


def encode_case(codec: ModuleType, size: int) -> Callable[[ModuleType], Callable[[], Any]]:
    tail = codec.envelope_tail("bench.task", 1_700_000_000_250, {})
    calls = [(f"user-{i}", "hello") for i in range(size)]
    return lambda mod: lambda: mod.encode_calls(calls, tail)


def decode_case(codec: ModuleType, size: int) -> Callable[[ModuleType], Callable[[], Any]]:
    tail = codec.envelope_tail("bench.task", 1_700_000_000_250, {})
    ids = [uuid.uuid4().hex for _ in range(size)]
    calls = [(f"user-{i}", "hello") for i in range(size)]
    envelopes = codec.encode_calls(calls, tail)
    reply: list[Any] = [size]  # claim replies lead with a header; jobs start at 1
    for job_id, env in zip(ids, envelopes):
        reply += [job_id.encode(), env]  # the claim reply's id, envelope pairs
    registry = {"bench.task": print}
    runnable, broken, _ = codec.decode_claim(reply, 1, registry)
    if len(runnable) != size or broken:  # time the path a worker takes, not an error path
        raise SystemExit(
            f"decode_claim case is malformed: {len(runnable)} runnable, {len(broken)} broken"
        )
    return lambda mod: lambda: mod.decode_claim(reply, 1, registry)


def backoff_case(kernel: str, size: int) -> Callable[[ModuleType], Callable[[], Any]]:
    """One retry policy's kernel over ``size`` attempts of 1..20 (and draws)."""
    rng = random.Random(7)
    attempts = [rng.randint(1, 20) for _ in range(size)]
    rands = [rng.random() for _ in range(size)]
    repeat = itertools.repeat
    params, with_rand = POLICIES[kernel]

    def make(mod: ModuleType) -> Callable[[], Any]:
        fn = getattr(mod, kernel)
        if with_rand:
            return lambda: list(map(fn, attempts, *[repeat(p, size) for p in params], rands))
        return lambda: list(map(fn, attempts, *[repeat(p, size) for p in params]))

    return make


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="much smaller sizes (CI smoke)")
    add_json_option(parser)
    parser.add_argument("--repeats", type=int, default=None, help="repeats per kernel")
    opts = parser.parse_args(argv)

    ref_codec, nat_codec, ref_backoff, nat_backoff = _modules()
    sizes = QUICK if opts.quick else FULL
    repeats = opts.repeats or (3 if opts.quick else 9)
    # calls per repeat, so that even the small kernels run long enough to time
    numbers = {"encode_calls": 1, "decode_claim": 2 if opts.quick else 20}

    cases = {
        "encode_calls": (encode_case(ref_codec, sizes["encode_calls"]), ref_codec, nat_codec),
        "decode_claim": (decode_case(ref_codec, sizes["decode_claim"]), ref_codec, nat_codec),
        **{
            kernel: (backoff_case(kernel, sizes[kernel]), ref_backoff, nat_backoff)
            for kernel in POLICIES
        },
    }
    results = []
    print(f"{'kernel':<14}  reference_us_per_item  native_us_per_item  speedup")
    for kernel, (make, ref_mod, nat_mod) in cases.items():
        ref_fn, nat_fn = make(ref_mod), make(nat_mod)
        if ref_fn() != nat_fn():  # a fast wrong answer is no answer
            raise SystemExit(f"{kernel}: native and reference results differ")
        size, number = sizes[kernel], numbers.get(kernel, 1)
        ref_s, nat_s = best_seconds([ref_fn, nat_fn], repeats, number)
        ref_us, nat_us = ref_s / size * 1e6, nat_s / size * 1e6
        speedup = ref_us / nat_us
        print(f"{kernel:<14}  {ref_us:21.4f}  {nat_us:18.4f}  {speedup:6.2f}x")
        results.append(
            {
                "kernel": kernel,
                "items": size,
                "reference_us_per_item": ref_us,
                "native_us_per_item": nat_us,
                "speedup": speedup,
            }
        )

    report = {
        "benchmark": "micro_codec",
        "quick": opts.quick,
        "repeats": repeats,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "results": results,
    }
    write_report(report, "micro_codec", opts.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
