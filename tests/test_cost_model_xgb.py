"""Features, the XGBoost cost model (save/load, bad files, objectives), and the RPC runner."""
from __future__ import annotations

import logging
import os
import pickle
import socket

import numpy as np
import pytest

from tvm_ascend.cost_model import (FEATURE_NAMES, CostModel, CostModelError, extract_features,
                                   load_or_none)
from tvm_ascend.cost_model.xgb_model import (DEFAULT_MODEL_PATH, evaluate, fit_best,
                                             pairwise_accuracy, peak_score, top_k_score)
from tvm_ascend.schedules import template_by_name
from tvm_ascend.soc import get_soc
from tvm_ascend.tuning import Candidate, RPCRunner, tune_kernel
from tvm_ascend.tuning.workloads import dataset, generate_workloads

SOC = get_soc("Ascend910B1")


@pytest.fixture(scope="module")
def groups():
    """A small labelled data set: 4 generated workloads on one SoC."""
    found = dataset(generate_workloads(4, seed=11), [SOC])
    assert len(found) >= 3
    return found


def _pairs(groups):
    return [(g["features"], g["times"]) for g in groups]


def test_features_are_deterministic_and_fixed_length():
    first = generate_workloads(3, seed=5)
    again = generate_workloads(3, seed=5)
    for a, b in zip(first, again):
        template = template_by_name(a.op_class)
        _, ta = template.schedule(a.prim_func, SOC)
        _, tb = template.schedule(b.prim_func, SOC)
        fa = extract_features(a.prim_func, ta, SOC)
        assert fa.shape == (len(FEATURE_NAMES),) and fa.dtype == np.float32
        assert fa.tobytes() == extract_features(a.prim_func, ta, SOC).tobytes()
        assert fa.tobytes() == extract_features(b.prim_func, tb, SOC).tobytes()
        assert np.isfinite(fa).all()


def test_ranking_metrics_on_known_orders():
    costs = np.array([4.0, 1.0, 2.0, 3.0])
    assert pairwise_accuracy(-costs, costs) == 1.0
    assert pairwise_accuracy(costs, costs) == 0.0
    assert top_k_score(-costs, costs, 1) == 1.0
    assert top_k_score(costs, costs, 1) == 0.25 and top_k_score(costs, costs, 4) == 1.0
    assert peak_score(-costs, costs) == 1.0


@pytest.mark.parametrize("suffix", [".json", ".ubj"])
def test_model_save_load_round_trip(tmp_path, groups, suffix):
    model = CostModel("reg", rounds=20).fit(_pairs(groups))
    path = model.save(tmp_path / f"m{suffix}")
    loaded = CostModel.load(path)
    feats = np.concatenate([g["features"] for g in groups])
    np.testing.assert_array_equal(loaded.predict(feats), model.predict(feats))
    assert loaded.objective == "reg"


def test_both_objectives_train_and_the_better_is_kept(groups):
    train, valid = _pairs(groups[: len(groups) // 2 + 1]), _pairs(groups[len(groups) // 2:])
    model, results = fit_best(train, valid, rounds=20)
    assert set(results) == {"reg", "rank"}
    best = max(results, key=lambda o: (results[o]["top1_score"],
                                       results[o]["pairwise_accuracy"]))
    assert model.objective == best
    metrics = evaluate(model, valid)
    assert 0.0 <= metrics["pairwise_accuracy"] <= 1.0 and 0.0 < metrics["top1_score"] <= 1.0


def test_bad_model_files_give_clear_errors_never_unpickle(tmp_path, groups, caplog):
    with pytest.raises(CostModelError, match="does not exist"):
        CostModel.load(tmp_path / "missing.json")
    good = CostModel("reg", rounds=5).fit(_pairs(groups)).save(tmp_path / "good.ubj")
    data = open(good, "rb").read()
    (tmp_path / "cut.ubj").write_bytes(data[: len(data) // 3])
    with pytest.raises(CostModelError, match="cut.ubj"):
        CostModel.load(tmp_path / "cut.ubj")
    (tmp_path / "evil.json").write_bytes(pickle.dumps({"x": 1}))
    with pytest.raises(CostModelError, match="evil.json"):
        CostModel.load(tmp_path / "evil.json")
    with pytest.raises(CostModelError, match="never loaded"):
        CostModel.load(tmp_path / "model.pkl")
    import xgboost as xgb  # a valid XGBoost model from elsewhere: foreign feature layout

    foreign = xgb.train({"verbosity": 0}, xgb.DMatrix(np.random.rand(20, 3),
                                                      label=np.random.rand(20)), 2)
    foreign.save_model(str(tmp_path / "foreign.json"))
    with pytest.raises(CostModelError, match="not written by this tvm-ascend"):
        CostModel.load(tmp_path / "foreign.json")
    with caplog.at_level(logging.WARNING, logger="tvm_ascend.cost_model"):
        assert load_or_none(tmp_path / "foreign.json") is None
    assert "falling back to the analytic timing model" in caplog.text


def test_search_with_an_unusable_model_falls_back_to_the_analytic_ranking(tmp_path):
    (workload,) = generate_workloads(1, seed=4)
    template = template_by_name(workload.op_class)
    analytic = tune_kernel("k", template, workload.prim_func, SOC, trials=3)
    fallback = tune_kernel("k", template, workload.prim_func, SOC, trials=3,
                           cost_model=load_or_none(tmp_path / "nothing.json"))
    assert analytic.history == fallback.history


def test_the_shipped_default_model_loads_and_is_small():
    assert DEFAULT_MODEL_PATH.exists(), "run benchmarks/train_cost_model.py"
    assert os.path.getsize(DEFAULT_MODEL_PATH) < 1 << 20
    model = CostModel.load(DEFAULT_MODEL_PATH)
    held_out = dataset(generate_workloads(2, seed=99), [SOC])
    metrics = evaluate(model, _pairs(held_out))
    assert metrics["top1_score"] >= 0.8 and metrics["pairwise_accuracy"] >= 0.7


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _candidate():
    (workload,) = generate_workloads(1, seed=4)
    template = template_by_name(workload.op_class)
    return Candidate("k", workload.op_class, workload.prim_func,
                     template.knob_space(workload.prim_func, SOC)[0], SOC)


def test_rpc_runner_against_a_loopback_server_skips_the_device_part():
    from tvm_ascend.tuning.rpc_runner import loopback_server

    with loopback_server(key="ascend.test", port=_free_port()) as server:
        runner = RPCRunner(server=("127.0.0.1", server.port), key="ascend.test")
        assert runner.ping() == {"cpu": True, "device_count": 0}
        (result,) = runner.measure([_candidate()])
    assert not result.ok and "no CANN runtime" in result.error and result.runner == "rpc"


def test_rpc_runner_against_a_loopback_tracker():
    pytest.importorskip("tornado", reason="TVM's RPC tracker needs tornado")
    from tvm.rpc.tracker import Tracker

    from tvm_ascend.tuning.rpc_runner import loopback_server

    port = _free_port()
    tracker = Tracker("127.0.0.1", port=port, port_end=port + 20, silent=True)
    try:
        with loopback_server(key="ascend.test", port=_free_port(),
                             tracker_addr=("127.0.0.1", tracker.port)):
            runner = RPCRunner(tracker=("127.0.0.1", tracker.port), key="ascend.test")
            (result,) = runner.measure([_candidate()])
            assert "no CANN runtime" in result.error
    finally:
        tracker.terminate()


def test_rpc_runner_reports_an_unreachable_tracker():
    from tvm_ascend.errors import AscendError

    runner = RPCRunner(server=("127.0.0.1", _free_port()), key="nobody")
    with pytest.raises(AscendError, match="unreachable"):
        runner.ping()


@pytest.mark.cann
def test_rpc_runner_times_kernels_on_a_board():
    host = os.environ.get("TVM_ASCEND_RPC_TRACKER")
    if not host:
        pytest.skip("set TVM_ASCEND_RPC_TRACKER=host:port of a tracker with Ascend boards")
    name, port = host.rsplit(":", 1)
    runner = RPCRunner(tracker=(name, int(port)), key="ascend")
    assert runner.ping()["device_count"] > 0
