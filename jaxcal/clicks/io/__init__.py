"""Readers for click logs: Yandex Relevance Prediction, TianGong-ST demo, NumPy, Parquet.

All readers return :class:`~jaxcal.clicks.Sessions` (one row per SERP; shorter SERPs are
padded and masked). The ``iter_*`` variants stream a file in chunks of whole sessions, for
logs larger than memory: deduplicate each chunk (``chunk.deduplicate()``) and concatenate,
since real logs repeat head queries heavily.

Every reader keeps every record of a file or raises one ``ValueError`` that names the file
and the place (``path:line`` with 1-based line numbers for the text formats, the 0-based
row and the column for Parquet, the array for ``.npz``). The only records a reader leaves
out on purpose are Yandex clicks on a URL that no result page of the session showed:
they are counted (:class:`ReadReport`), a warning gives the count, and
``on_unshown_click="error"`` makes them an error.

Yandex Relevance Prediction Challenge (tab-separated, one action per line)::

    SessionID  TimePassed  Q  QueryID  RegionID  URL_1 ... URL_n
    SessionID  TimePassed  C  URLID

A click belongs to the latest SERP of its session (so far) that shows the URL. Repeated
clicks on the same result of the same SERP are counted once (click models have binary
clicks; :attr:`ReadReport.repeated_clicks` counts the repeats).

* Rejected (``ValueError`` with ``path:line``): a line with fewer than 4 fields; a record
  type other than ``Q`` or ``C``; ``SessionID``, ``TimePassed`` or ``RegionID`` that are
  not non-negative integers below ``2**63``; ``QueryID`` and URL ids that are not
  non-negative integers below ``2**31``; a query line without URLs or showing a URL twice
  (a click on it would be ambiguous); a click line with other than 4 fields; a click
  before the first query line of its session; a session whose lines are not contiguous
  (its id reappears after another session's lines); a ``TimePassed`` smaller than the
  one on the session's previous line (line order is the order of the actions); text that
  is not UTF-8; a file without query lines.
* Ignored: blank lines; the values of ``TimePassed`` and ``RegionID`` (checked, not
  stored); clicks on URLs not shown (see above).

TianGong-ST demo (``tiangong-st-demo`` in the data directory,
:func:`jaxcal.data.default_data_dir`), tab-separated::

    session_id  query_id  [d_1, ..., d_n]  [vtype_1, ...]  [c_1, ..., c_n]  ([labels])

* Rejected (``ValueError`` with ``path:line``): other than 5 or 6 fields; ids that are
  not non-negative integers (``session_id`` below ``2**63``, ``query_id`` and documents
  below ``2**31``); lists that are not JSON lists of integers (JSON booleans, floats and
  strings are rejected, and so is nesting); an empty SERP; vertical types that are
  negative or beyond ``2**63``; clicks other than 0/1; labels outside the 64-bit integer
  range; vertical types, clicks or labels whose list length differs from the SERP's;
  text that is not UTF-8; a file without SERPs.
* Ignored: blank lines; the session ids, vertical types and labels (checked, not
  stored: click models use the query, the SERP and the clicks).
"""

from jaxcal.clicks.io._common import LogChunks, ReadReport, UnshownClickWarning
from jaxcal.clicks.io.arrays import iter_parquet, read_npz, read_parquet
from jaxcal.clicks.io.tiangong import iter_tiangong, read_tiangong
from jaxcal.clicks.io.yandex import iter_yandex, read_yandex

__all__ = [
    "read_yandex",
    "iter_yandex",
    "read_tiangong",
    "iter_tiangong",
    "read_npz",
    "read_parquet",
    "iter_parquet",
    "ReadReport",
    "LogChunks",
    "UnshownClickWarning",
]
