"""The synchronous client."""

import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Union

import grpc

import json

from . import _code
from . import _requests as rq
from ._connection import MAX_FOLLOWS, Settings, stubs_for
from ._pb.cohort.v1 import training_pb2, training_report_pb2, training_service_pb2 as ts
from ._pb.cohort.v1 import training_events_pb2, training_logs_pb2
from ._pb.cohort.v1 import gpu_pb2, sweep_pb2, sweep_service_pb2 as ss
from .errors import CohortError

#: How long ``watch`` keeps trying to resume a broken stream.
RESUME_FOR_S = 60.0


class Client:
    """A client of a cohort coordinator (or of several sharing PostgreSQL).

    Every argument defaults as the CLI's does: ``coordinator`` from
    ``COHORT_COORDINATOR`` (else ``http://127.0.0.1:50051``; several,
    comma-separated or a list: the first that answers is used, and a
    standby's NOT_LEADER answer sends the call on to the leader),
    ``token`` from ``COHORT_TOKEN``, ``ca_cert`` (PEM bytes or a path) from
    ``COHORT_CA_CERT``. ``timeout`` bounds each unary call (None: none).
    Failed calls raise :class:`CohortError`. Use it as a context manager,
    or call :meth:`close`.
    """

    def __init__(self, coordinator: Union[str, Sequence[str], None] = None, *,
                 token: Optional[str] = None, ca_cert: Union[bytes, str, Path, None] = None,
                 connect_timeout: float = 5.0, timeout: Optional[float] = 30.0,
                 allow_plaintext_token: bool = False):
        self._settings = Settings.resolve(coordinator, token, ca_cert, connect_timeout,
                                          timeout, allow_plaintext_token)
        self._channel: Optional[grpc.Channel] = None
        self._stubs: Optional[dict] = None

    # -- connection ---------------------------------------------------------

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = self._stubs = None

    def _connect(self) -> dict:
        if self._stubs is not None:
            return self._stubs
        last = None
        for url in self._settings.urls:
            channel = _open_channel(self._settings, url)
            try:
                grpc.channel_ready_future(channel).result(timeout=self._settings.connect_timeout)
            except grpc.FutureTimeoutError:
                channel.close()
                last = url
                continue
            self._channel, self._stubs = channel, stubs_for(channel)
            return self._stubs
        raise self._settings.unreachable(last)

    def _follow(self, error: CohortError) -> bool:
        """Points the client at the leader a NOT_LEADER answer named."""
        if not self._settings.follow(error.leader):
            return False
        self.close()
        return True

    def _unary(self, method: str, request, timeout: Optional[float] = -1.0,
               service: str = "training"):
        timeout = self._settings.timeout if timeout == -1.0 else timeout
        for follows in range(MAX_FOLLOWS + 1):
            stub = self._connect()[service]
            try:
                return getattr(stub, method)(request, metadata=self._settings.metadata,
                                             timeout=timeout)
            except grpc.RpcError as e:
                error = CohortError.from_rpc_error(e)
                if follows < MAX_FOLLOWS and self._follow(error):
                    continue
                raise error from None
        raise AssertionError("unreachable")

    def _stream(self, method: str, request, service: str = "training") -> Iterator:
        """A server stream; a NOT_LEADER answer before its first message is
        followed to the leader."""
        for follows in range(MAX_FOLLOWS + 1):
            stub = self._connect()[service]
            call = getattr(stub, method)(request, metadata=self._settings.metadata)
            try:
                first = next(call)
            except StopIteration:
                return
            except grpc.RpcError as e:
                error = CohortError.from_rpc_error(e)
                if follows < MAX_FOLLOWS and self._follow(error):
                    continue
                raise error from None
            yield first
            try:
                yield from call
            except grpc.RpcError as e:
                raise CohortError.from_rpc_error(e) from None
            finally:
                call.cancel()
            return

    # -- trainings ----------------------------------------------------------

    def gpus(self) -> List[gpu_pb2.Gpu]:
        """Every GPU the agents report, with its state and owner."""
        gpus, token = [], ""
        while True:
            page = self._unary("ListGpus", gpu_pb2.ListGpusRequest(page_token=token),
                               service="gpu")
            gpus.extend(page.gpus)
            token = page.next_page_token
            if not token:
                return gpus

    def parse_config(self, config: rq.ConfigLike, *, code=None,
                     code_max_mib: int = 64):
        """The TrainingConfig of a TOML file or text, as the coordinator reads
        it. A program's code directory (``code``, or the config's ``[program]
        code`` path, relative to the file) is packed and uploaded first, and
        the config names the snapshot, as ``cohort train submit`` does."""
        source = rq.config_source(config)
        if not isinstance(source, str):
            if code is not None:
                raise TypeError("code= goes with a TOML config")
            return source
        packing = _code.plan(config, source, code)
        if packing is None:
            return self._unary("ParseTrainingConfig", rq.parse_request(source))
        table, directory = packing
        snapshot, archive = _code.pack(directory, code_max_mib << 20)
        with archive:
            self.upload_code(snapshot, archive)
        text = json.dumps(_code.with_snapshot(table, snapshot))
        return self._unary("ParseTrainingConfig", rq.parse_json_request(text))

    def upload_code(self, snapshot: Dict, archive) -> bool:
        """Uploads a packed archive unless the coordinator holds its sha256;
        whether it was sent."""
        try:
            held = self._unary("GetCode", ts.GetCodeRequest(sha256=snapshot["sha256"]))
            if held.size_bytes == snapshot["size_bytes"]:
                return False
        except CohortError as e:
            if e.reason != "CODE_NOT_FOUND":
                raise
        stub = self._connect()["training"]
        try:
            stub.UploadCode(_code.upload_requests(snapshot, archive),
                            metadata=self._settings.metadata)
        except grpc.RpcError as e:
            raise CohortError.from_rpc_error(e) from None
        return True

    def submit(self, config: rq.ConfigLike, gpus: rq.GpusLike = None, *, name: str = "",
               priority_class: str = "", labels: Optional[Dict[str, str]] = None,
               request_id: Optional[str] = None, max_restarts: Optional[int] = None,
               borrow: Optional[bool] = None, queue: bool = True, code=None,
               code_max_mib: int = 64) -> training_pb2.Training:
        """Creates a training from a config (a TOML path or text, or a
        TrainingConfig). ``gpus``: a count, a list of GPU ids, or None (as
        many free GPUs as fit). A retry with the same ``request_id`` returns
        the training the first call created. A program's code directory
        (``code=``, or ``[program] code``) travels with it (see
        :meth:`parse_config`)."""
        config = self.parse_config(config, code=code, code_max_mib=code_max_mib)
        request = rq.create_request(config, gpus, name=name,
                                    priority_class=priority_class, labels=labels,
                                    request_id=request_id, max_restarts=max_restarts,
                                    borrow=borrow, queue=queue)
        return self._unary("CreateTraining", request)

    def sweep(self, config: rq.ConfigLike, grid: Dict[str, Sequence], *,
              name: Optional[str] = None, gpus: rq.GpusLike = None, priority_class: str = "",
              labels: Optional[Dict[str, str]] = None) -> List[training_pb2.Training]:
        """A grid of trainings from one base config, as ``cohort train
        sweep``: every combination of ``grid`` (``{"model.k": [16, 32]}``,
        at most 256), each labelled ``sweep=NAME`` and ``KEY=VALUE``. Every
        config is checked by the coordinator before any is submitted."""
        name, plan = rq.sweep_plan(rq.base_text(config), grid, name, labels)
        configs = [self._unary("ParseTrainingConfig", rq.parse_json_request(text))
                   for text, *_ in plan]
        return [self._unary("CreateTraining", rq.create_request(
                    parsed, gpus, name=display, priority_class=priority_class, labels=tags,
                    request_id=request_id))
                for parsed, (_, tags, display, request_id) in zip(configs, plan)]

    def create_sweep(self, config: rq.ConfigLike, space: rq.SpaceLike, *, objective: str,
                     maximize: Optional[bool] = None, searcher: str = "random",
                     max_trials: int = 0, max_concurrent: int = 0, max_gpu_hours: float = 0.0,
                     gpus: rq.GpusLike = None, seed: int = 0, priority_class: str = "",
                     name: str = "", request_id: Optional[str] = None,
                     eta: float = 0.0) -> sweep_pb2.Sweep:
        """A sweep the coordinator runs (``cohort sweep create``): trials of
        ``config`` over ``space`` (a dict, or a TOML file or text:
        ``{"optim.learning_rate": {"log_uniform": [1e-4, 1e-2]}}``), ranked on
        ``objective``: a metric (``maximize`` None: the metric's own direction) or
        ``"frontier"``: the trials on the L0 / explained-variance frontier."""
        request = rq.create_sweep_request(
            self.parse_config(config), space, objective=objective, maximize=maximize,
            searcher=searcher, max_trials=max_trials, max_concurrent=max_concurrent,
            max_gpu_hours=max_gpu_hours, gpus=gpus, seed=seed,
            priority_class=priority_class, name=name, request_id=request_id, eta=eta)
        return self._unary("CreateSweep", request, service="sweep")

    def get_sweep(self, sweep_id: str) -> sweep_pb2.Sweep:
        """A sweep with its trials, their params and objective values, and the best."""
        return self._unary("GetSweep", ss.GetSweepRequest(id=sweep_id), service="sweep")

    def list_sweeps(self, page_size: int = 100) -> Iterator[sweep_pb2.Sweep]:
        """Every sweep the caller's team may see, newest first."""
        token = ""
        while True:
            page = self._unary("ListSweeps", ss.ListSweepsRequest(
                page_size=page_size, page_token=token), service="sweep")
            yield from page.sweeps
            token = page.next_page_token
            if not token:
                return

    def cancel_sweep(self, sweep_id: str, reason: str = "") -> sweep_pb2.Sweep:
        """Cancels a sweep and every trial of it not ended."""
        return self._unary("CancelSweep", ss.CancelSweepRequest(id=sweep_id, reason=reason),
                           service="sweep")

    def wait_sweep(self, sweep_id: str, poll_s: float = 1.0) -> sweep_pb2.Sweep:
        """The sweep once it ended (SUCCEEDED, FAILED or CANCELLED)."""
        while True:
            sweep = self.get_sweep(sweep_id)
            if sweep.state != sweep_pb2.Sweep.RUNNING:
                return sweep
            time.sleep(poll_s)

    def get(self, training_id: str) -> training_pb2.Training:
        return self._unary("GetTraining", ts.GetTrainingRequest(id=training_id))

    def list(self, *, states: Optional[Sequence[Union[str, int]]] = None,
             labels: Optional[Dict[str, str]] = None, team: Optional[str] = None,
             page_size: int = 100) -> Iterator[training_pb2.Training]:
        """Every training matching the filters, newest first (pages fetched
        as the iterator goes)."""
        token = ""
        while True:
            page = self._unary("ListTrainings",
                               rq.list_request(states, labels, team, page_size, token))
            yield from page.trainings
            token = page.next_page_token
            if not token:
                return

    def cancel(self, training_id: str, reason: str = "") -> training_pb2.Training:
        return self._unary("CancelTraining",
                           ts.CancelTrainingRequest(id=training_id, reason=reason))

    def report(self, training_id: str, *, omit_metrics: bool = False
               ) -> training_report_pb2.TrainingReport:
        return self._unary("GetTrainingReport",
                           ts.GetTrainingReportRequest(id=training_id, omit_metrics=omit_metrics))

    def watch(self, training_id: str, *, after_sequence: int = 0, rank_stats: bool = False
              ) -> Iterator[training_events_pb2.TrainingEvent]:
        """The training's events in order, from after ``after_sequence`` (0:
        its whole history) until it ends. A broken stream, or one that fell
        behind (a ``lagged`` notice), is resumed after the last event
        received, for up to a minute of failed attempts: no event is missed
        or repeated."""
        last = after_sequence
        failing_since = None
        while True:
            try:
                for event in self._stream("WatchTraining",
                                          rq.watch_request(training_id, last, rank_stats)):
                    failing_since = None
                    if event.WhichOneof("event") == "lagged":
                        break
                    last = event.sequence
                    yield event
                else:
                    return
            except CohortError as error:
                if error.code != grpc.StatusCode.UNAVAILABLE:
                    raise
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > RESUME_FOR_S:
                    raise
                self.close()
                time.sleep(0.5)

    def wait(self, training_id: str) -> training_pb2.Training:
        """Watches until the training ends; its final state."""
        for _ in self.watch(training_id):
            pass
        return self.get(training_id)

    def logs(self, training_id: str, *, follow: bool = True, tail: int = 0,
             ranks: Optional[Sequence[int]] = None, attempt: Optional[int] = None
             ) -> Iterator[training_logs_pb2.LogLine]:
        """The ranks' log lines: each rank's last ``tail`` (0: 100), then,
        with ``follow``, new lines until the attempt ends."""
        yield from self._stream("WatchLogs",
                                rq.logs_request(training_id, follow, tail, ranks, attempt))

    def download_checkpoint(self, training_id: str, dest: Union[str, Path], *,
                            step: Optional[int] = None, format: str = "native",
                            best: bool = False) -> List[Path]:
        """Writes a checkpoint's files into ``dest``: the newest (or
        ``step``'s, or with ``best`` the lowest validation loss's), as
        stored (``"native"``) or as SAELens loads it (``"saelens"``).
        Returns the files written."""
        writer = rq.CheckpointWriter(dest)
        for chunk in self._stream("DownloadCheckpoint",
                                  rq.download_request(training_id, step, format, best)):
            writer.add(chunk)
        return writer.finish()[1]


def _open_channel(settings: Settings, url: str) -> grpc.Channel:
    from ._connection import target_of
    credentials = settings.credentials(url)
    if credentials is None:
        return grpc.insecure_channel(target_of(url))
    return grpc.secure_channel(target_of(url), credentials)
