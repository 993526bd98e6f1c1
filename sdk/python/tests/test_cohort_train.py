import json
import os
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


def test_a_step_an_earlier_attempt_left_is_replaced(rank0):
    ct.save_checkpoint(10, lambda d: (d / "state.bin").write_bytes(b"old"))
    path = ct.save_checkpoint(10, lambda d: (d / "state.bin").write_bytes(b"new"))
    assert (path / "state.bin").read_bytes() == b"new"
    assert sorted(p.name for p in rank0.iterdir()) == ["step-00000010"]


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
    assert ct.resume_path() is None
    monkeypatch.setenv("COHORT_RESUME_PATH", str(tmp_path / "ck" / "step-00000020" / "last.ckpt"))
    assert ct.resume_path().name == "last.ckpt"


def test_a_notice_file_or_sigterm_asks_to_stop(monkeypatch, tmp_path):
    import os
    import signal

    notice = tmp_path / ".cohort" / "notice-attempt-1-rank-0"
    monkeypatch.setenv("COHORT_NOTICE_FILE", str(notice))
    monkeypatch.setattr(ct, "_stop_requested", False)
    assert ct.notice_file() == notice
    assert not ct.should_stop(), "no file yet"
    notice.parent.mkdir(parents=True)
    notice.write_text("COHORT_PREEMPTED=1\n")
    assert ct.should_stop()
    notice.unlink()
    assert not ct.should_stop()
    # After the first call SIGTERM is a request to stop, not the end.
    os.kill(os.getpid(), signal.SIGTERM)
    assert ct.should_stop()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    monkeypatch.setattr(ct, "_handler_installed", False)
    monkeypatch.setattr(ct, "_stop_requested", False)


def test_outside_cohort_nothing_asks_to_stop(monkeypatch):
    import signal

    monkeypatch.delenv("COHORT_NOTICE_FILE", raising=False)
    monkeypatch.setattr(ct, "_stop_requested", False)
    assert ct.notice_file() is None
    assert not ct.should_stop()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    monkeypatch.setattr(ct, "_handler_installed", False)


def test_ranks_agree_to_stop_when_one_was_noticed(tmp_path):
    """Two gloo ranks: only rank 1's notice file says so; both stop."""
    import socket
    import subprocess
    import sys

    pytest.importorskip("torch.distributed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = (
        "import os, torch.distributed as dist, cohort_train as ct\n"
        "dist.init_process_group('gloo')\n"
        "print(ct.should_stop(), flush=True)\n"
        "dist.destroy_process_group()\n"
    )
    notice = tmp_path / "notice-rank-1"
    notice.write_text("COHORT_PREEMPTED=1\n")
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        env["COHORT_NOTICE_FILE"] = str(notice if rank == 1 else tmp_path / "none")
        procs.append(subprocess.Popen([sys.executable, "-c", script], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert [o[0].strip() for o in outs] == ["True", "True"], outs


def test_an_elastic_rank_knows_its_range_and_its_share(monkeypatch):
    for name in ("WORLD_SIZE", "COHORT_MIN_WORLD_SIZE", "COHORT_MAX_WORLD_SIZE",
                 "COHORT_GLOBAL_BATCH"):
        monkeypatch.delenv(name, raising=False)
    # Outside cohort: one process, no range, no global batch.
    assert ct.world_size() == 1
    assert ct.world_sizes() == (1, 1)
    assert ct.global_batch() is None
    with pytest.raises(ValueError, match="no global batch"):
        ct.local_batch()
    assert ct.local_batch(64) == 64
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("COHORT_MIN_WORLD_SIZE", "2")
    monkeypatch.setenv("COHORT_MAX_WORLD_SIZE", "8")
    monkeypatch.setenv("COHORT_GLOBAL_BATCH", "96")
    assert ct.world_sizes() == (2, 8)
    assert ct.global_batch() == 96
    assert ct.local_batch() == 24
    monkeypatch.setenv("WORLD_SIZE", "5")
    with pytest.raises(ValueError, match="does not split over 5 ranks"):
        ct.local_batch()
