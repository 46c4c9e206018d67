"""The cost model: Ascend timing model, features, XGBoost ranking model, tuning database.

Estimates only: ``estimate_kernel`` / ``estimate_launch`` are the analytic timing model the
fusion planner and the tuner call; ``CostModel`` learns to rank candidates from measured (or
estimated) times (the tuner's model, and the planner's: ``PlannerRanking`` ranks a group's
tilings before the timing model estimates the best ones); ``TuningDatabase`` keeps every
measured candidate and the best knobs per workload. The tuner that measures
and searches (``tvm_ascend.tuning``) stands above the pipeline and imports this package, never
the other way.

Example
-------
>>> from tvm_ascend.cost_model import estimate_launch
>>> from tvm_ascend.soc import get_soc
>>> estimate_launch(0, 0, get_soc("Ascend910B1")).time_us   # an empty launch: its start-up
8.0
"""
from .timing import (KernelEstimate, device_startup_us, end_to_end_us, estimate_kernel,
                     estimate_launch, estimate_model, l2_bytes)
from .vector_work import VectorWork, count_vector_work
from .database import TuningDatabase, TuningDatabaseError, workload_of
from .features import FEATURE_NAMES, extract_features
from .xgb_model import CostModel, CostModelError, load_or_none
from .planner_model import PlannerRanking, planner_ranking

__all__ = ["KernelEstimate", "device_startup_us", "end_to_end_us", "estimate_kernel", "estimate_launch", "estimate_model", "l2_bytes",
           "VectorWork", "count_vector_work", "TuningDatabase", "TuningDatabaseError",
           "workload_of", "FEATURE_NAMES", "extract_features", "CostModel", "CostModelError",
           "load_or_none", "PlannerRanking", "planner_ranking"]
