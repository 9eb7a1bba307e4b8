"""pcache: the Linux page cache rebuilt in userspace, from Python.

* ``replay(trace, sizes=..., variants=..., fmt=...)``: miss ratios of a
  block trace through pcache's variants, the same record as
  ``pcache replay --json``; ``presets()`` lists the variants.
* ``read_trace(path)`` / ``Trace(pages)``: traces as iterators of page
  accesses, to filter or sample in Python and replay the result.
* ``PageCache(...)``: the engine embedded: ``open``/``open_memory`` give a
  ``File`` with ``read``, ``write``, ``fsync``, ``fadvise``; ``vmstat()``
  and the run-time tunables (``sysctl``).
* Eviction policies in Python: ``replay(trace, policy=MyPolicy)`` (a class:
  a fresh one per cache size) and ``PageCache(..., policy=MyPolicy())``
  call its ``folio_added``, ``folio_accessed``, ``folio_removed`` and
  ``evict_candidates`` (optional: ``folio_refault``, ``folio_putback``,
  ``folio_reclaimable``) with ``Folio`` values; an exception in a hook is
  raised when the replay or call returns. A hook must not call into a
  cache. About 0.3-0.7 us per hook call (BENCHMARKS.md).
* ``pcache.sweep``: traces x sizes x variants, on local cores or on Ray
  (``python -m pcache.sweep --help``, or ``pcache sweep``).

Errors are Python exceptions: ``OSError`` with the errno the kernel would
return (EBADF for a closed file, EINVAL for a negative offset, EFBIG past
the largest file, ...), ``ValueError`` for bad arguments and values,
``KeyError`` for a name that is not a tunable.
"""

from ._pcache import (
    PAGE_SIZE,
    File,
    Folio,
    PageCache,
    Sysctl,
    Trace,
    TraceIter,
    __version__,
    default_variants,
    guess_format,
    markdown_table,
    parse_trace,
    plot,
    presets,
    read_trace,
    render,
    replay,
    tunable_names,
)

__all__ = [
    "PAGE_SIZE",
    "File",
    "Folio",
    "PageCache",
    "Sysctl",
    "Trace",
    "TraceIter",
    "__version__",
    "default_variants",
    "guess_format",
    "markdown_table",
    "parse_trace",
    "plot",
    "presets",
    "read_trace",
    "render",
    "replay",
    "tunable_names",
]
