"""Analysis: how dynamic is the data, how many buckets, and what a shape costs on your model.

:func:`analyze` reports padding and shapes per strategy and k (and a DataLoader's real shapes);
:func:`recommend_num_buckets` picks k by a padding target or by predicted time from the costs
that :func:`calibrate` measures on your model.
"""

from bucketloader.analysis.calibration import Calibration, calibrate
from bucketloader.analysis.recommend import Candidate, Recommendation, recommend_num_buckets
from bucketloader.analysis.report import DynamicityReport, analyze

__all__ = [
    "Calibration",
    "Candidate",
    "DynamicityReport",
    "Recommendation",
    "analyze",
    "calibrate",
    "recommend_num_buckets",
]
