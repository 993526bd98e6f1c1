"""cohort_client against a real coordinator and agent (conftest.py)."""

import asyncio
import json
import os
import subprocess
import sys

import grpc
import pytest

from cohort_client import AsyncClient, Client, CohortError, FINAL_STATES, State, pb
from conftest import BINS, job, start_cohort, wait_for_gpus, wait_leading


def test_submit_watch_report_and_download(cohort, tmp_path):
    config = tmp_path / "job.toml"
    config.write_text(job(60))
    with Client(cohort.url) as client:
        wait_for_gpus(client)
        training = client.submit(config, gpus=2, name="from python",
                                 labels={"suite": "py-client"})
        assert training.id.startswith("trn-")
        assert training.display_name == "from python"
        kinds, sequences = [], []
        for event in client.watch(training.id, rank_stats=True):
            kinds.append(event.WhichOneof("event"))
            sequences.append(event.sequence)
        # The whole history (rank stats included), in order, each event
        # once, to the end.
        assert sequences == list(range(1, len(sequences) + 1)), sequences
        assert "progress" in kinds and "checkpoint" in kinds and "finished" in kinds, kinds
        done = client.get(training.id)
        assert done.state == State.SUCCEEDED, done
        assert done.state in FINAL_STATES
        # Label filters, with paging hidden (a page of one).
        listed = list(client.list(labels={"suite": "py-client"}, page_size=1))
        assert [t.id for t in listed] == [training.id]
        assert list(client.list(states=["QUEUED"], labels={"suite": "py-client"})) == []
        report = client.report(training.id)
        assert report.training_id == training.id
        files = client.download_checkpoint(training.id, tmp_path / "ckpt")
        names = sorted(f.name for f in files)
        assert "manifest.json" in names and "state.safetensors" in names, names
        assert all(f.stat().st_size > 0 for f in files)
        lines = list(client.logs(training.id, follow=False))
        assert lines and {line.rank for line in lines} == {0, 1}


def test_a_sweep_submits_the_grid_checked_first(cohort):
    with Client(cohort.url) as client:
        made = client.sweep(job(1_000_000), {"model.d_sae": [64, 96], "optim.seed": [1, 2]},
                            name="py-sweep", gpus=1, priority_class="low")
        assert len(made) == 4
        listed = {t.id: t for t in client.list(labels={"sweep": "py-sweep"})}
        assert set(listed) == {t.id for t in made}
        combos = {(t.labels["model.d_sae"], t.labels["optim.seed"]) for t in listed.values()}
        assert combos == {("64", "1"), ("64", "2"), ("96", "1"), ("96", "2")}
        first = client.get(made[0].id)
        assert first.config.model.d_sae == 64 and first.config.optim.seed == 1
        assert first.display_name == "py-sweep d_sae=64 seed=1"
        # Retried: nothing twice.
        again = client.sweep(job(1_000_000), {"model.d_sae": [64, 96], "optim.seed": [1, 2]},
                             name="py-sweep", gpus=1, priority_class="low")
        assert [t.id for t in again] == [t.id for t in made]
        for t in made:
            client.cancel(t.id, "test over")
        # A combination the coordinator refuses: nothing submitted.
        with pytest.raises(CohortError) as bad:
            client.sweep(job(), {"model.d_sae": [64, -1]}, name="py-bad")
        assert bad.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert list(client.list(labels={"sweep": "py-bad"})) == []


def test_errors_carry_the_code_and_the_stable_reason(cohort):
    with Client(cohort.url) as client:
        with pytest.raises(CohortError) as missing:
            client.get("trn-nonesuch")
        assert missing.value.code == grpc.StatusCode.NOT_FOUND
        assert missing.value.reason == "TRAINING_NOT_FOUND"
        with pytest.raises(CohortError) as bad:
            client.submit("[model]\nd_in = -1\n", gpus=1)
        assert bad.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert bad.value.reason, bad.value


def test_an_elastic_training_from_a_range(cohort, tmp_path):
    config = tmp_path / "job.toml"
    config.write_text(job(20))
    with Client(cohort.url) as client:
        wait_for_gpus(client)
        training = client.submit(config, gpus=(1, 2))
        assert (training.gpu_request.min_count, training.gpu_request.max_count) == (1, 2)
        for _ in client.watch(training.id):
            pass
        done = client.get(training.id)
        assert done.state == State.SUCCEEDED, done
        assert done.world_size in (1, 2)
        with pytest.raises(CohortError) as bad:
            client.submit(config, gpus=(3, 2))
        assert bad.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "gpus.max_count" in str(bad.value), bad.value


def test_cancel_and_a_resumed_watch(cohort):
    with Client(cohort.url) as client:
        training = client.submit(job(1_000_000), gpus=2)
        seen = []
        for event in client.watch(training.id, rank_stats=True):
            seen.append(event.sequence)
            if event.WhichOneof("event") == "progress":
                break
        # A new watch from the last event received goes on from there.
        client.cancel(training.id, "enough")
        rest = [e.sequence for e in
                client.watch(training.id, after_sequence=seen[-1], rank_stats=True)]
        assert rest and rest[0] == seen[-1] + 1, (seen, rest)
        assert client.get(training.id).state == State.CANCELLED


def test_several_coordinators_the_first_that_answers(cohort):
    dead = "http://127.0.0.1:9"  # discard: nothing listens
    with Client([dead, cohort.url], connect_timeout=1.0) as client:
        assert client.gpus()


def test_asyncio(cohort):
    async def main():
        async with AsyncClient(cohort.url) as client:
            training = await client.submit(job(30), gpus=2, labels={"suite": "py-aio"})
            events = [e async for e in client.watch(training.id)]
            assert events[-1].WhichOneof("event") in ("state_change", "finished")
            done = await client.get(training.id)
            assert done.state == State.SUCCEEDED, done
            listed = [t.id async for t in client.list(labels={"suite": "py-aio"})]
            assert listed == [training.id]
            with pytest.raises(CohortError) as missing:
                await client.get("trn-nonesuch")
            assert missing.value.reason == "TRAINING_NOT_FOUND"
    asyncio.run(main())


def test_tls_with_a_token(secured):
    token = secured.tokens["vision"]
    with Client(secured.url, token=token, ca_cert=secured.ca) as client:
        training = client.submit(job(30), gpus=1)
        assert client.get(training.id).state == State.QUEUED
        assert [t.id for t in client.list()] == [training.id]
        client.cancel(training.id)
    with Client(secured.url, ca_cert=secured.ca) as anonymous:
        with pytest.raises(CohortError) as refused:
            anonymous.get(training.id)
        assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED
        assert refused.value.reason == "UNAUTHENTICATED"


def test_environment_and_plaintext_token_refusal(monkeypatch, secured, tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_bytes(secured.ca)
    monkeypatch.setenv("COHORT_COORDINATOR", secured.url)
    monkeypatch.setenv("COHORT_TOKEN", secured.tokens["ops"])
    monkeypatch.setenv("COHORT_CA_CERT", str(ca))
    with Client() as client:
        assert isinstance(list(client.list()), list)
    with pytest.raises(ValueError, match="plaintext"):
        Client("http://10.1.2.3:50051", token="secret")


def test_a_standby_sends_the_call_to_the_leader(pg_schema, tmp_path):
    """Two coordinators on one PostgreSQL: the standby (which forwards
    nothing) answers NOT_LEADER naming the leader; the client follows."""
    flags = ["--database-url", pg_schema, "--no-forward"]
    leader = start_cohort(tmp_path, agent=False, extra=flags, name="leader")
    standby = None
    try:
        wait_leading(leader.url)
        standby = start_cohort(tmp_path, agent=False, extra=flags, name="standby")
        with Client(standby.url) as client:
            training = client.submit(job(30), gpus=1)
            assert client.get(training.id).id == training.id
            assert client._settings.urls[0] == leader.url
    finally:
        for running in (standby, leader):
            if running is not None:
                running.stop()


def test_watch_resumes_after_the_coordinator_restarts(tmp_path):
    """The stream breaks when the coordinator dies; the iterator resumes
    from the last event it gave once one answers again: every event once,
    in order, to the end."""
    cohort = start_cohort(tmp_path)
    try:
        with Client(cohort.url) as client:
            wait_for_gpus(client)
            training = client.submit(job(600), gpus=2)
            sequences, restarted = [], False
            for event in client.watch(training.id, rank_stats=True):
                sequences.append(event.sequence)
                if not restarted and event.WhichOneof("event") == "progress":
                    cohort.restart_coordinator()
                    restarted = True
            assert restarted
            assert sequences == list(range(1, len(sequences) + 1)), sequences
            assert client.get(training.id).state == State.SUCCEEDED
    finally:
        cohort.stop()


def test_the_cli_exports_tensorboard_curves_its_loader_reads(cohort, tmp_path):
    """`cohort train tensorboard` (the CLI) writes an event file that
    TensorBoard's own loader reads back, one point per progress event:
    after the end, and with --follow from the start to the end."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def cli(*args):
        return [str(BINS / "cohort"), "--coordinator", cohort.url, "-o", "json",
                "train", "tensorboard", *args]

    def loss_curve(run_dir):
        loaded = EventAccumulator(str(run_dir))
        loaded.Reload()
        assert {"train/loss", "train/explained_variance", "train/l0"} <= set(
            loaded.Tags()["scalars"])
        return [(p.step, round(p.value, 4)) for p in loaded.Scalars("train/loss")]

    with Client(cohort.url) as client:
        training = client.submit(job(120), gpus=2)
        follower = subprocess.Popen(cli(training.id, "--out", str(tmp_path / "live"),
                                        "--follow"),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        progress = [e.progress for e in client.watch(training.id)
                    if e.WhichOneof("event") == "progress"]
        assert client.get(training.id).state == State.SUCCEEDED
    expected = [(p.step, round(p.loss, 4)) for p in progress]
    followed, errors = follower.communicate(timeout=60)
    assert follower.returncode == 0, errors
    assert json.loads(followed)["events"] == len(progress)
    assert loss_curve(tmp_path / "live") == expected

    done = subprocess.run(cli(training.id, "--out", str(tmp_path / "after")),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert loss_curve(tmp_path / "after") == expected


def _code_project(root):
    """job.toml beside src/ (train.py, data/words.txt, a big.bin left out)."""
    src = root / "src"
    (src / "data").mkdir(parents=True)
    (src / "train.py").write_text(
        "import sys\nprint('DATA', open(sys.argv[1]).read().strip(), flush=True)\n")
    (src / "data" / "words.txt").write_text("hello from python\n")
    (src / ".cohortignore").write_text("big.bin\n")
    (src / "big.bin").write_bytes(b"\0" * (2 << 20))
    python = os.path.abspath(sys.executable)
    (root / "job.toml").write_text(
        f'[program]\ncommand = ["{python}", "train.py", "data/words.txt"]\n'
        'code = "src"\nmemory_gib_per_rank = 1\n')
    return root / "job.toml"


def test_a_programs_code_travels_with_it(cohort, tmp_path):
    config = _code_project(tmp_path)
    with Client(cohort.url) as client:
        wait_for_gpus(client)
        training = client.submit(config, gpus=1, labels={"suite": "py-code"})
        code = training.config.program.code
        assert len(code.sha256) == 64 and code.files == 3, code
        for _ in client.watch(training.id):
            pass
        done = client.get(training.id)
        assert done.state == State.SUCCEEDED, done
        lines = [line.line for line in client.logs(training.id, follow=False)]
        assert "DATA hello from python" in lines, lines
        # The same directory packs to the same bytes: nothing is sent again.
        from cohort_client import _code
        snapshot, archive = _code.pack(tmp_path / "src")
        with archive:
            assert snapshot["sha256"] == code.sha256
            assert client.upload_code(snapshot, archive) is False
        # Over the cap, the largest file is named; nothing reaches the server.
        (tmp_path / "src" / ".cohortignore").unlink()
        with pytest.raises(CohortError) as big:
            client.submit(config, gpus=1, code_max_mib=1)
        assert big.value.reason == "CODE_TOO_LARGE" and "big.bin" in big.value.message
        (tmp_path / "src" / "big.bin").unlink()
        (tmp_path / "src" / "etc").symlink_to("/etc")
        with pytest.raises(CohortError) as link:
            client.submit(config, gpus=1)
        assert link.value.reason == "CODE_SYMLINK_LEAVES"
        (tmp_path / "src" / "etc").unlink()
        outside = tmp_path / "job-outside.toml"
        outside.write_text(config.read_text().replace('code = "src"', 'code = "../.."'))
        with pytest.raises(CohortError) as far:
            client.submit(outside, gpus=1)
        assert "outside the config file's directory" in far.value.message

    async def main():
        async with AsyncClient(cohort.url) as client:
            t = await client.submit(config, gpus=1, labels={"suite": "py-code-aio"})
            assert t.config.program.code.sha256 != code.sha256  # no .cohortignore now
            events = [e async for e in client.watch(t.id)]
            assert events
            assert (await client.get(t.id)).state == State.SUCCEEDED
    asyncio.run(main())


def test_a_sweep_the_coordinator_runs(cohort):
    space = {"optim.learning_rate": {"log_uniform": [1e-3, 1e-2]},
             "model.d_sae": {"choice": [64, 96]}}
    with Client(cohort.url) as client:
        sweep = client.create_sweep(job(40), space, objective="loss", max_trials=3,
                                    max_concurrent=2, gpus=1, seed=3, name="py-search")
        assert sweep.id.startswith("swp-") and sweep.seed == 3
        done = client.wait_sweep(sweep.id, poll_s=0.5)
        assert done.state == done.SUCCEEDED, done
        assert len(done.trials) == 3
        assert all(t.state == State.SUCCEEDED for t in done.trials)
        for t in done.trials:
            assert 1e-3 <= t.params["optim.learning_rate"] <= 1e-2
            assert t.params["model.d_sae"] in (64, 96)
            assert client.get(t.training_id).labels["sweep"] == sweep.id
        lowest = min(done.trials, key=lambda t: t.objective)
        assert done.best[0] == lowest.training_id
        assert sweep.id in [s.id for s in client.list_sweeps()]
        # Judged on the frontier: best names the trials on it.
        front = client.create_sweep(job(40), {"model.l1_coefficient": {"choice": [1e-4, 0.3]}},
                                    objective="frontier", searcher="grid", max_concurrent=1,
                                    gpus=1, name="py-frontier")
        front = client.wait_sweep(front.id, poll_s=0.5)
        assert front.state == front.SUCCEEDED, front
        on = sorted(t.training_id for t in front.trials if t.on_frontier)
        assert on and on == sorted(front.best), front
        assert all(t.HasField("l0") and t.HasField("explained_variance") for t in front.trials)
        assert front.frontier_hypervolume > 0
        # Refused naming the parameter: nothing stored.
        with pytest.raises(CohortError) as bad:
            client.create_sweep(job(), {"optim.learning_rate": {"uniform": [0.1, 0.01]}},
                                objective="loss")
        assert bad.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert bad.value.reason == "INVALID_ARGUMENT"
        assert "space[optim.learning_rate]" in str(bad.value)
        # A TOML space, through the asyncio client, cancelled at once.
        async def main():
            async with AsyncClient(cohort.url) as aio:
                made = await aio.create_sweep(
                    job(1_000_000), '"model.d_sae" = { choice = [64] }\n', objective="l0",
                    gpus=1, max_trials=1)
                cancelled = await aio.cancel_sweep(made.id, "test over")
                assert cancelled.state == cancelled.CANCELLED
                return made.id
        made = asyncio.run(main())
        with pytest.raises(CohortError) as missing:
            client.get_sweep("swp-nonesuch")
        assert missing.value.reason == "SWEEP_NOT_FOUND"
        assert client.get_sweep(made).state == pb.sweep_pb2.Sweep.CANCELLED
