"""Old code vs new code: the digests of 300 stream and 150 sampler cases (tests/differential.py)
recorded before the streams' renovation (issue 20) must be reproduced exactly, except the cases
listed in CHANGED, each a deliberate change named with its reason.

The stream digests are those of 7a0e618 (before issue 20). The sampler digests were re-recorded
from main at 4a1d89e, after issue 22's deliberate sampler changes (the epoch advances after a
full pass, the report counts what a loader handed out), with which issue 20's branch agrees
case for case; before that merge they too matched 7a0e618 exactly. The 20 PackSampler cases were
re-recorded once more after issue 21's merge, which gave PackSampler a ``report()`` (recorded by
the harness when a producer has one) and a warning with the count when ``last_batch="drop"``
leaves documents out (7 of them); without those two keys every record is unchanged (checked).

A case in CHANGED is compared with its digest re-recorded from the current code
(tests/data/differential_current.json, written by ``python tests/differential.py
--record-changed``, which prints the record keys each re-recording changes): a later change to it,
deliberate or not, fails here until it is re-recorded. The keys the golden predates (a packing
state's solver version and tail records, ``differential.LATER_KEYS``) count in that recording
only."""

from __future__ import annotations

import json
from typing import Any

import differential
import pytest

EMPTY_SHARD = (
    "issue 21 item 4: a lane (rank or DataLoader worker) whose shard is empty takes its steps as "
    "padding only (an empty PlannedBatch, num_real=0, counted in padded_rows) instead of raising "
    "'has no sample at all'"
)
PRE_FIRST_BATCH = (
    "issue 21 item 4: a state taken before the first batch is the replay state (format 3 / 2, "
    "workers 0), which also resumes behind DataLoader workers, not the in-process exact state"
)
EVEN_BATCHES = (
    "issue 26 item 1: under max_tokens with last_batch 'pad'/'fill' a bucket is planned at the "
    "even ceil(n / (R*m)) rows (NOTE [ Even batches ]): same steps and padded lengths, other "
    "batch sizes (TokenBudget(balance=False) gives the old plan)"
)
BFD_FIRST = (
    "issue 26 item 3: the packing solver runs best-fit decreasing first and keeps the tighter of "
    "BFD and MBS (NOTE [ Two solvers, the tighter plan ], SOLVER_VERSION 2): other rows, never "
    "more row tokens; the packing stream packs its tail with the same solver. SOLVER_VERSION 3 "
    "(NOTE [ Planning at the speed of best-fit decreasing ]) runs MBS only where it pays, so "
    "these cases plan BFD's rows (never more than BFD's)"
)
PROMOTION = (
    "issue 26 item 1: under max_tokens with last_batch 'pad' a bucket's spare rows take leftovers "
    "of the shorter buckets it covers (NOTE [ Promotion of leftovers ]): filler rows under 1% "
    "on 8 ranks, other batches, rows and (never more) steps; a plan with nothing to promote is "
    "the even plan unchanged (TokenBudget(promote=False) keeps it)"
)
SEEK = (
    "issue 24 item 3: a stream over a source read by index (a list here) resumes by seeking "
    "(NOTE [ Seeking a source ]): its in-process state's source entry is the read position with "
    "'seek': True instead of 0 (a replay from the start); batches, the rest after the resume and "
    "every other state key unchanged (checked against 108da34 case by case)"
)
COUNTER_SHUFFLE = (
    "issue 24 item 1: a shuffled BucketSampler draws each bucket's order from a keyed "
    "permutation evaluated only at the rank's positions (plan version 2, NOTE [ Counter-based "
    "shuffle ]) instead of numpy's Fisher-Yates over every bucket: the same steps and shapes, "
    "other samples in each batch (other repeats or dropped samples under fill / drop); the "
    "state's plan_digest gains '/shuffle=2'"
)
SEEK_RANKS = (
    "issue 24 item 3 (session 3): a stream split over ranks (steps_per_epoch) over a source read "
    "by index (a list here) has an exact in-process state (format 2 / 1: positions of its "
    "buffers, stand-ins and last batches, and the step reached; NOTE [ Seeking a source ]) "
    "instead of the replay state (format 3 / 2), so the resume seeks instead of replaying from "
    "the start of the epoch: the resumed pass skips 0 batches instead of k; batches, the rest "
    "after the resume and every other record unchanged (checked against c8414c7 case by case)"
)
NEVER_SEEN = (
    "s21-pack: under last_batch='drop' a sampler whose bucket (or packed row length) holds fewer "
    "samples than one step makes no batch of it, so those samples are never seen, the same ones "
    "every epoch: its leaves-out warning now says so and counts them (warned whatever their "
    "share, was silent under 1%); batches, states and reports unchanged"
)
TRUNCATED = (
    "session 21: overflow='truncate' cutting more than 1% of the samples (or documents) is "
    "warned about (DataLossWarning, with the elements past the cut), as leaving them out is; "
    "batches, states and reports unchanged"
)
FILL_REPEATS = (
    "s22-fill: under last_batch='fill' a sampler whose repeats pass 5% of the samples (documents) "
    "or train some 3 times or more an epoch (a bucket or row length with fewer samples than one "
    "step repeats all of them) warns with the count and last_batch='pad' as the way out "
    "(NOTE [ What fill repeats ]); batches, states and reports unchanged"
)
STREAM_FILL = (
    "s23-streamfill: a BucketIterable under last_batch='fill' completes a short batch (or a "
    "step that finds nothing new) with the least seen of the samples it handed out last (its "
    "bucket's, then the covered buckets') and of the batch's own, before copying its own "
    "(fill version 2, NOTE [ What a stream's fill repeats ]): other samples in those fill "
    "batches and so other real elements per cell (report cells, state cell_stats) and other last "
    "batches in a split stream's state; same shapes, batch sizes, num_real, steps and repeat "
    "counts (checked case by case against main fd8b8fa). Every fill stream's state records "
    "config['fill'] = 2 and the appearances of its repeated samples, a one-pass one also its "
    "buckets' last samples (state 'fill'), all in state_versions"
)
PACK_STREAM_FILL = (
    "s24-packfill: a PackIterable under last_batch='fill' completes a short batch (or a dry "
    "step) with the least seen of the rows it handed out last (its last two batches) and of the "
    "batch's own, instead of copies of its own rows (a dry step: its last batch again); fill "
    "version 2, NOTE [ What a stream's fill repeats ]: other rows in those fill batches, so other "
    "documents, tokens and num_real there; same shapes, steps, batch counts, stats and the "
    "batches before the fills (checked case by case against main 32e15e8). Every fill stream's "
    "state records config['fill'] = 2 (state_versions); an exact one the rows handed out last "
    "and the appearances of those repeated ('fill', in place of a split stream's 'last')"
)
#: Cases whose behaviour changed on purpose: case -> why.
EMPTY_EPOCH = (
    "s5-polish: a sampler whose plan has no batch (last_batch='drop' leaving out every sample) "
    "is refused at construction with a ValueError naming the fix, instead of warning '100.0%' "
    "and yielding an empty epoch"
)
ZERO_LENGTH_COUNT = (
    "s11-polish: a BucketIterable counts the samples of length 0 it keeps; its in-process exact "
    "state's stats gain 'zero_length' (0 here: no case streams length 0); batches, the rest "
    "after the resume and the report unchanged (checked against 1516140 case by case)"
)
REPORT_PROMOTED = (
    "s19: report().totals always has 'promoted' (0 where the plan promotes nothing: batch_size "
    "plans, promote=False); it was absent there, so totals['promoted'], which the docs point "
    "to, raised KeyError; batches, states and every other report key unchanged"
)
RANK_REPEATS = (
    "s28-user: under last_batch 'pad' or 'keep' over several ranks, a sampler whose repeats for "
    "ranks without a sample of a bucket's last step pass 5% of the samples warns with the count "
    "and the way out (fewer num_buckets or ranks); batches, states and reports unchanged"
)
CHANGED: dict[str, str] = {
    "sampler-42": EMPTY_EPOCH,
    "stream-13": EMPTY_SHARD + "; " + SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-33": EMPTY_SHARD + "; " + STREAM_FILL,
    "stream-38": PRE_FIRST_BATCH,
    "stream-62": EMPTY_SHARD,
    "stream-66": PRE_FIRST_BATCH,
    "stream-67": EMPTY_SHARD + "; " + STREAM_FILL,
    "stream-83": PRE_FIRST_BATCH,
    "stream-88": EMPTY_SHARD,
    "stream-97": PRE_FIRST_BATCH,
    "stream-109": EMPTY_SHARD + "; " + SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-130": PRE_FIRST_BATCH,
    "stream-159": EMPTY_SHARD,
    "stream-183": EMPTY_SHARD + "; " + SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-202": EMPTY_SHARD,
    "stream-213": PRE_FIRST_BATCH,
    "stream-214": EMPTY_SHARD + "; " + SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-231": EMPTY_SHARD + "; " + SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-260": PRE_FIRST_BATCH,
    "stream-299": EMPTY_SHARD + "; " + SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "sampler-0": EVEN_BATCHES + "; " + COUNTER_SHUFFLE + "; " + PROMOTION,
    "sampler-4": EVEN_BATCHES + "; " + COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-7": EVEN_BATCHES + "; " + COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-14": BFD_FIRST,
    "sampler-17": EVEN_BATCHES + "; " + COUNTER_SHUFFLE + "; " + PROMOTION,
    "sampler-32": EVEN_BATCHES + "; " + COUNTER_SHUFFLE + "; " + PROMOTION,
    "sampler-39": EVEN_BATCHES + "; " + COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-43": EVEN_BATCHES + "; " + REPORT_PROMOTED,
    "sampler-44": EVEN_BATCHES + "; " + COUNTER_SHUFFLE + "; " + PROMOTION,
    "sampler-47": EVEN_BATCHES + "; " + PROMOTION,
    "sampler-50": BFD_FIRST,
    "sampler-52": EVEN_BATCHES
    + "; "
    + COUNTER_SHUFFLE
    + "; "
    + REPORT_PROMOTED
    + "; "
    + FILL_REPEATS,
    "sampler-54": BFD_FIRST,
    "sampler-55": EVEN_BATCHES + "; " + COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-56": EVEN_BATCHES + "; " + REPORT_PROMOTED,
    "sampler-63": BFD_FIRST,
    "sampler-67": BFD_FIRST,
    "sampler-74": BFD_FIRST,
    "sampler-75": EVEN_BATCHES + "; " + REPORT_PROMOTED + "; " + FILL_REPEATS,
    "sampler-76": BFD_FIRST,
    "sampler-77": BFD_FIRST,
    "sampler-80": BFD_FIRST,
    "sampler-81": EVEN_BATCHES + "; " + COUNTER_SHUFFLE + "; " + PROMOTION,
    "sampler-83": EVEN_BATCHES + "; " + COUNTER_SHUFFLE + "; " + REPORT_PROMOTED + "; " + TRUNCATED,
    "sampler-88": BFD_FIRST,
    "sampler-91": BFD_FIRST,
    "sampler-96": EVEN_BATCHES + "; " + COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-99": EVEN_BATCHES + "; " + COUNTER_SHUFFLE + "; " + PROMOTION,
    "sampler-105": EVEN_BATCHES + "; " + COUNTER_SHUFFLE + "; " + PROMOTION,
    "sampler-110": BFD_FIRST + "; " + TRUNCATED,
    "sampler-113": EVEN_BATCHES + "; " + REPORT_PROMOTED,
    "sampler-114": BFD_FIRST,
    "sampler-117": EVEN_BATCHES + "; " + REPORT_PROMOTED,
    "sampler-118": EVEN_BATCHES + "; " + PROMOTION,
    "sampler-127": BFD_FIRST,
    "sampler-128": EVEN_BATCHES + "; " + REPORT_PROMOTED,
    "sampler-129": BFD_FIRST,
    "sampler-130": BFD_FIRST + "; " + EMPTY_EPOCH,
    "sampler-135": EVEN_BATCHES + "; " + COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-137": EVEN_BATCHES + "; " + COUNTER_SHUFFLE + "; " + PROMOTION,
    "sampler-139": BFD_FIRST,
    "sampler-140": BFD_FIRST,
    "sampler-142": EVEN_BATCHES + "; " + PROMOTION,
    "sampler-146": BFD_FIRST,
    "sampler-147": BFD_FIRST,
    "sampler-49": PROMOTION + "; " + COUNTER_SHUFFLE,
    "sampler-64": PROMOTION + "; " + COUNTER_SHUFFLE,
    "sampler-69": PROMOTION + "; " + COUNTER_SHUFFLE,
    "sampler-71": PROMOTION,
    "sampler-116": PROMOTION,
    "sampler-122": PROMOTION + "; " + COUNTER_SHUFFLE,
    "sampler-148": PROMOTION + "; " + COUNTER_SHUFFLE,
    "stream-5": BFD_FIRST,
    "stream-9": BFD_FIRST + "; " + SEEK,
    "stream-18": BFD_FIRST,
    "stream-23": BFD_FIRST + "; " + SEEK,
    "stream-27": BFD_FIRST + "; " + SEEK_RANKS + "; " + PACK_STREAM_FILL,
    "stream-36": BFD_FIRST + "; " + PACK_STREAM_FILL,
    "stream-52": BFD_FIRST + "; " + SEEK_RANKS + "; " + PACK_STREAM_FILL,
    "stream-87": BFD_FIRST + "; " + PACK_STREAM_FILL,
    "stream-110": BFD_FIRST + "; " + SEEK_RANKS,
    "stream-114": BFD_FIRST,
    "stream-127": BFD_FIRST + "; " + SEEK + "; " + PACK_STREAM_FILL,
    "stream-138": BFD_FIRST,
    "stream-152": BFD_FIRST + "; " + PACK_STREAM_FILL,
    "stream-157": BFD_FIRST,
    "stream-166": BFD_FIRST + "; " + SEEK,
    "stream-169": BFD_FIRST + "; " + PACK_STREAM_FILL,
    "stream-171": BFD_FIRST + "; " + SEEK_RANKS,
    "stream-172": BFD_FIRST + "; " + SEEK,
    "stream-173": BFD_FIRST + "; " + SEEK + "; " + PACK_STREAM_FILL,
    "stream-194": BFD_FIRST + "; " + SEEK,
    "stream-218": BFD_FIRST + "; " + SEEK,
    "stream-219": BFD_FIRST,
    "stream-245": BFD_FIRST,
    "stream-247": BFD_FIRST + "; " + SEEK + "; " + PACK_STREAM_FILL,
    "stream-248": BFD_FIRST,
    "stream-250": BFD_FIRST,
    "stream-266": BFD_FIRST + "; " + SEEK_RANKS,
    "stream-281": BFD_FIRST + "; " + SEEK,
    "stream-294": BFD_FIRST,
    "stream-296": BFD_FIRST + "; " + SEEK_RANKS,
    "stream-0": SEEK + "; " + PACK_STREAM_FILL,
    "stream-2": SEEK + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-7": SEEK + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-10": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-29": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-31": SEEK,
    "stream-34": SEEK + "; " + PACK_STREAM_FILL,
    "stream-35": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-37": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-39": SEEK + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-44": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-45": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-61": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-68": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-75": SEEK + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-77": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-79": SEEK + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-82": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-84": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-90": SEEK,
    "stream-102": SEEK + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-105": SEEK + "; " + PACK_STREAM_FILL,
    "stream-106": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-108": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-120": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-129": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-131": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-141": SEEK + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-146": SEEK,
    "stream-150": SEEK + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-151": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-158": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-174": SEEK + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-181": SEEK,
    "stream-187": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-192": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-200": SEEK + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-203": SEEK + "; " + PACK_STREAM_FILL,
    "stream-204": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-205": SEEK + "; " + PACK_STREAM_FILL,
    "stream-208": SEEK + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-216": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-227": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-230": SEEK,
    "stream-233": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-236": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-240": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-241": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-244": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-251": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-256": SEEK + "; " + PACK_STREAM_FILL,
    "stream-259": SEEK + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-261": SEEK + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-265": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-268": SEEK + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-269": SEEK + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-279": SEEK + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-289": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-291": SEEK + "; " + ZERO_LENGTH_COUNT,
    "stream-297": SEEK + "; " + ZERO_LENGTH_COUNT,
    "sampler-1": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-2": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-3": COUNTER_SHUFFLE + "; " + EMPTY_EPOCH,
    "sampler-5": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED + "; " + NEVER_SEEN,
    "sampler-9": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-10": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-12": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-16": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-18": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-19": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-20": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-22": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED + "; " + FILL_REPEATS,
    "sampler-23": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED + "; " + FILL_REPEATS,
    "sampler-25": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-28": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED + "; " + TRUNCATED,
    "sampler-30": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-33": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-34": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-36": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED + "; " + NEVER_SEEN,
    "sampler-37": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-38": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-40": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED + "; " + RANK_REPEATS,
    "sampler-45": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-46": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-57": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED + "; " + FILL_REPEATS,
    "sampler-60": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED + "; " + TRUNCATED,
    "sampler-70": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED + "; " + NEVER_SEEN,
    "sampler-78": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-79": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-82": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-85": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-86": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED + "; " + FILL_REPEATS,
    "sampler-87": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-89": COUNTER_SHUFFLE + "; " + EMPTY_EPOCH,
    "sampler-92": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-94": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-95": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-97": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED + "; " + NEVER_SEEN,
    "sampler-100": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-103": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED + "; " + NEVER_SEEN,
    "sampler-106": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-107": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-108": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED + "; " + FILL_REPEATS,
    "sampler-111": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-112": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-115": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-119": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-120": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED + "; " + FILL_REPEATS,
    "sampler-123": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-126": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-134": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "sampler-143": COUNTER_SHUFFLE + "; " + EMPTY_EPOCH,
    "sampler-145": COUNTER_SHUFFLE + "; " + REPORT_PROMOTED,
    "stream-4": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-6": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-11": SEEK_RANKS,
    "stream-12": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-14": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-15": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-17": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-21": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-25": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-28": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-30": SEEK_RANKS,
    "stream-48": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-49": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-50": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-51": SEEK_RANKS + "; " + PACK_STREAM_FILL,
    "stream-53": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-58": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-64": SEEK_RANKS + "; " + PACK_STREAM_FILL,
    "stream-65": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-70": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-71": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-78": SEEK_RANKS + "; " + PACK_STREAM_FILL,
    "stream-86": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-89": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-93": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-99": SEEK_RANKS + "; " + PACK_STREAM_FILL,
    "stream-100": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-101": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-104": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-113": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-118": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-121": SEEK_RANKS + "; " + PACK_STREAM_FILL,
    "stream-122": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-124": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-125": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-128": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-133": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-140": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-142": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-145": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-148": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-153": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-154": SEEK_RANKS,
    "stream-155": SEEK_RANKS,
    "stream-160": SEEK_RANKS,
    "stream-162": SEEK_RANKS,
    "stream-163": SEEK_RANKS + "; " + PACK_STREAM_FILL,
    "stream-165": SEEK_RANKS + "; " + PACK_STREAM_FILL,
    "stream-168": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-170": SEEK_RANKS,
    "stream-176": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-177": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-180": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-190": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-195": SEEK_RANKS,
    "stream-197": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-199": SEEK_RANKS + "; " + PACK_STREAM_FILL,
    "stream-207": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-212": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-220": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-221": SEEK_RANKS + "; " + PACK_STREAM_FILL,
    "stream-224": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-228": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-239": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-252": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-254": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-257": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-262": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-263": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "stream-271": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-272": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-273": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-274": SEEK_RANKS,
    "stream-277": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT + "; " + STREAM_FILL,
    "stream-286": SEEK_RANKS + "; " + PACK_STREAM_FILL,
    "stream-298": SEEK_RANKS + "; " + ZERO_LENGTH_COUNT,
    "sampler-6": REPORT_PROMOTED,
    "sampler-8": REPORT_PROMOTED,
    "sampler-11": REPORT_PROMOTED,
    "sampler-13": REPORT_PROMOTED,
    "sampler-15": REPORT_PROMOTED,
    "sampler-24": REPORT_PROMOTED,
    "sampler-26": REPORT_PROMOTED,
    "sampler-35": REPORT_PROMOTED,
    "sampler-48": REPORT_PROMOTED,
    "sampler-51": REPORT_PROMOTED,
    "sampler-53": REPORT_PROMOTED + "; " + RANK_REPEATS,
    "sampler-58": REPORT_PROMOTED,
    "sampler-59": REPORT_PROMOTED + "; " + FILL_REPEATS,
    "sampler-62": REPORT_PROMOTED,
    "sampler-65": REPORT_PROMOTED,
    "sampler-66": REPORT_PROMOTED + "; " + RANK_REPEATS,
    "sampler-68": REPORT_PROMOTED,
    "sampler-72": REPORT_PROMOTED,
    "sampler-73": REPORT_PROMOTED,
    "sampler-84": REPORT_PROMOTED,
    "sampler-90": REPORT_PROMOTED,
    "sampler-93": REPORT_PROMOTED,
    "sampler-98": REPORT_PROMOTED,
    "sampler-104": REPORT_PROMOTED,
    "sampler-121": REPORT_PROMOTED,
    "sampler-125": REPORT_PROMOTED,
    "sampler-133": REPORT_PROMOTED,
    "sampler-141": REPORT_PROMOTED + "; " + NEVER_SEEN,
    "sampler-149": REPORT_PROMOTED,
    "stream-112": STREAM_FILL,
    "stream-115": STREAM_FILL,
    "stream-116": STREAM_FILL,
    "stream-132": STREAM_FILL,
    "stream-144": STREAM_FILL,
    "stream-161": STREAM_FILL,
    "stream-184": STREAM_FILL,
    "stream-232": STREAM_FILL,
    "stream-234": STREAM_FILL,
    "stream-270": STREAM_FILL,
    "stream-3": STREAM_FILL,
    "stream-43": STREAM_FILL,
    "stream-46": STREAM_FILL,
    "stream-55": STREAM_FILL,
    "stream-76": STREAM_FILL,
    "stream-8": STREAM_FILL,
    "stream-20": PACK_STREAM_FILL,
    "stream-41": PACK_STREAM_FILL,
    "stream-91": PACK_STREAM_FILL,
    "stream-201": PACK_STREAM_FILL,
    "stream-280": PACK_STREAM_FILL,
}


@pytest.fixture(scope="module")
def golden() -> dict[str, str]:
    return json.loads(differential.GOLDEN.read_text())


@pytest.fixture(scope="module")
def current() -> dict[str, dict[str, Any]]:
    return json.loads(differential.CURRENT.read_text())


def test_the_harness_covers_enough_cases(golden):
    assert sum(k.startswith("stream-") for k in golden) >= 200
    assert sum(k.startswith("sampler-") for k in golden) >= 100


def test_streams_and_samplers_behave_as_before(golden, current):
    records = differential.run_all()
    got = {name: differential.golden_digest(rec) for name, rec in records.items()}
    assert set(got) == set(golden)
    differ = sorted(n for n in golden if got[n] != golden[n] and n not in CHANGED)
    assert not differ, f"{len(differ)} cases changed: {differ[:20]}"
    unchanged = sorted(n for n in CHANGED if got[n] == golden[n])
    assert not unchanged, f"listed as changed but identical: {unchanged}"
    # the changed cases against their re-recorded digests (all keys, the later ones included)
    fix = "if deliberate, run `python tests/differential.py --record-changed` and commit its file"
    assert set(current) == set(CHANGED), (
        f"{differential.CURRENT.name} records other cases than CHANGED lists; {fix}"
    )
    drift = {
        n: differential.changed_keys(current[n]["keys"], differential.key_digests(records[n]))
        for n in sorted(CHANGED, key=differential.case_order)
        if differential.digest(records[n]) != current[n]["digest"]
    }
    first = dict(list(drift.items())[:20])
    assert not drift, f"{len(drift)} changed cases differ from their recording: {first}; {fix}"


def test_changed_keys_names_the_deepest_keys_that_differ():
    old = {"len": 2, "state": {"stats": {"a": 1}, "epoch": 0, "x": 1}, "batches": [[0], [1]]}
    new = {"len": 2, "state": {"stats": {"a": 2}, "epoch": 0, "y": 1}, "run": {"e": 1}}
    before, after = differential.key_digests(old), differential.key_digests(new)
    assert differential.changed_keys(before, after) == [
        "-batches",
        "+run",
        "state/stats",
        "-state/x",
        "+state/y",
    ]
    assert differential.changed_keys(before, before) == []
    assert differential.recording(old)["digest"] == differential.digest(old)
