import json
import math

import pytest

import cohort_train as ct


@pytest.fixture
def rank0(monkeypatch, tmp_path):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("COHORT_CHECKPOINT_DIR", str(tmp_path / "ck"))
    monkeypatch.delenv("COHORT_RESUME_DIR", raising=False)
    return tmp_path / "ck"


def lines(capsys):
    return [json.loads(l) for l in capsys.readouterr().out.splitlines()]


def test_report_prints_what_was_given_and_nothing_else(rank0, capsys):
    ct.report(5, total_steps=100, loss=0.25, episode_return=12)
    ct.report(6)
    assert lines(capsys) == [
        {"event": "progress", "step": 5, "total_steps": 100, "loss": 0.25, "episode_return": 12},
        {"event": "progress", "step": 6},
    ]


def test_a_nan_loss_stays_nan(rank0, capsys):
    ct.finish(9, loss=float("nan"))
    out = capsys.readouterr().out
    assert "NaN" in out
    assert math.isnan(json.loads(out)["loss"])


def test_only_rank_0_speaks_or_writes(monkeypatch, rank0, capsys):
    monkeypatch.setenv("RANK", "1")
    assert not ct.is_main()
    ct.report(1, loss=1.0)
    assert ct.save_checkpoint(1, lambda d: (d / "x").write_text("x")) is None
    assert capsys.readouterr().out == ""
    assert not rank0.exists()


def test_metrics_must_be_numbers(rank0):
    with pytest.raises(TypeError):
        ct.report(1, phase="rollout")


def test_a_checkpoint_is_complete_by_rename_and_old_ones_go(rank0):
    for step in (10, 20, 30):
        path = ct.save_checkpoint(step, lambda d: (d / "state.bin").write_bytes(b"s"), keep=2)
        assert path.name == f"step-{step:08d}"
        assert (path / "state.bin").read_bytes() == b"s"
    names = sorted(p.name for p in rank0.iterdir())
    assert names == ["step-00000020", "step-00000030"], "no temporary directory is left"
    assert ct.step_of(rank0 / "step-00000030") == 30
    assert ct.step_of(rank0 / ".step-00000030.tmp-1") is None


def test_a_failed_write_leaves_no_checkpoint(rank0):
    def fail(d):
        (d / "half").write_text("x")
        raise OSError("disk full")

    with pytest.raises(OSError):
        ct.save_checkpoint(5, fail)
    assert list(rank0.iterdir()) == []


def test_resume_dir_is_none_on_a_fresh_start(rank0, monkeypatch, tmp_path):
    assert ct.resume_dir() is None
    monkeypatch.setenv("COHORT_RESUME_DIR", str(tmp_path / "ck" / "step-00000020"))
    assert ct.resume_dir().name == "step-00000020"
    assert ct.checkpoint_dir() == rank0
