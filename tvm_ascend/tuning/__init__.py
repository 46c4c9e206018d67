"""Tuning: search each kernel's tiling knobs, measure candidates, record the best.

The tuner stands above the pipeline (beside ``cli.py``): ``tune_model`` partitions a model
through ``partition_for_ascend`` and measures every NPU kernel's candidates; the estimates it
ranks them by come from ``cost_model`` below, which never imports this package.
``LocalRunner`` / ``RPCRunner`` measure candidates (on this machine, or on boards through TVM's
RPC tracker, whose board side is ``tuning/board.py``); ``workloads`` generates the training
workloads of the cost model's ranking models; ``retrain_planner_model`` retrains the planner's
model from a tuning database (``tuning/retrain.py``).

Example
-------
>>> results = tune_model("m.onnx", trials=16, database="tuning_db")   # doctest: +SKIP
>>> print(summary_table(results))                                    # doctest: +SKIP
"""
from .runner import Candidate, LocalRunner, MeasureResult
from .rpc_runner import RPCRunner
from .retrain import retrain_planner_model
from .search import TuneResult, summary_table, tune_kernel, tune_model

__all__ = ["Candidate", "LocalRunner", "MeasureResult", "RPCRunner", "TuneResult",
           "retrain_planner_model", "summary_table", "tune_kernel", "tune_model"]
