"""The asyncio client: :class:`Client`'s calls as coroutines and async
iterators, on ``grpc.aio``."""

import asyncio
import json
import time
from pathlib import Path
from typing import AsyncIterator, Dict, List, Optional, Sequence, Union

import grpc
import grpc.aio

from . import _code
from . import _requests as rq
from ._connection import MAX_FOLLOWS, Settings, stubs_for, target_of
from ._pb.cohort.v1 import training_pb2, training_report_pb2, training_service_pb2 as ts
from ._pb.cohort.v1 import training_events_pb2, training_logs_pb2
from ._pb.cohort.v1 import gpu_pb2, sweep_pb2, sweep_service_pb2 as ss
from .client import RESUME_FOR_S
from .errors import CohortError


class AsyncClient:
    """:class:`cohort_client.Client` for asyncio: the same arguments, the
    same defaults, the same errors. ``async with AsyncClient() as c: ...``"""

    def __init__(self, coordinator: Union[str, Sequence[str], None] = None, *,
                 token: Optional[str] = None, ca_cert: Union[bytes, str, Path, None] = None,
                 connect_timeout: float = 5.0, timeout: Optional[float] = 30.0,
                 allow_plaintext_token: bool = False):
        self._settings = Settings.resolve(coordinator, token, ca_cert, connect_timeout,
                                          timeout, allow_plaintext_token)
        self._channel: Optional[grpc.aio.Channel] = None
        self._stubs: Optional[dict] = None

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
        self._channel = self._stubs = None

    async def _connect(self) -> dict:
        if self._stubs is not None:
            return self._stubs
        last = None
        for url in self._settings.urls:
            credentials = self._settings.credentials(url)
            channel = (grpc.aio.insecure_channel(target_of(url)) if credentials is None
                       else grpc.aio.secure_channel(target_of(url), credentials))
            try:
                await asyncio.wait_for(channel.channel_ready(), self._settings.connect_timeout)
            except asyncio.TimeoutError:
                await channel.close()
                last = url
                continue
            self._channel, self._stubs = channel, stubs_for(channel)
            return self._stubs
        raise self._settings.unreachable(last)

    async def _follow(self, error: CohortError) -> bool:
        if not self._settings.follow(error.leader):
            return False
        await self.close()
        return True

    async def _unary(self, method: str, request, service: str = "training"):
        for follows in range(MAX_FOLLOWS + 1):
            stub = (await self._connect())[service]
            try:
                return await getattr(stub, method)(request, metadata=self._settings.metadata,
                                                   timeout=self._settings.timeout)
            except grpc.RpcError as e:
                error = CohortError.from_rpc_error(e)
                if follows < MAX_FOLLOWS and await self._follow(error):
                    continue
                raise error from None
        raise AssertionError("unreachable")

    async def _stream(self, method: str, request, service: str = "training"
                      ) -> AsyncIterator:
        for follows in range(MAX_FOLLOWS + 1):
            stub = (await self._connect())[service]
            call = getattr(stub, method)(request, metadata=self._settings.metadata)
            stream = call.__aiter__()
            try:
                first = await stream.__anext__()
            except StopAsyncIteration:
                return
            except grpc.RpcError as e:
                error = CohortError.from_rpc_error(e)
                if follows < MAX_FOLLOWS and await self._follow(error):
                    continue
                raise error from None
            try:
                yield first
                async for message in stream:
                    yield message
            except grpc.RpcError as e:
                raise CohortError.from_rpc_error(e) from None
            finally:
                call.cancel()
            return

    async def gpus(self) -> List[gpu_pb2.Gpu]:
        gpus, token = [], ""
        while True:
            page = await self._unary("ListGpus", gpu_pb2.ListGpusRequest(page_token=token),
                                     service="gpu")
            gpus.extend(page.gpus)
            token = page.next_page_token
            if not token:
                return gpus

    async def parse_config(self, config: rq.ConfigLike, *, code=None,
                           code_max_mib: int = 64):
        source = rq.config_source(config)
        if not isinstance(source, str):
            if code is not None:
                raise TypeError("code= goes with a TOML config")
            return source
        packing = _code.plan(config, source, code)
        if packing is None:
            return await self._unary("ParseTrainingConfig", rq.parse_request(source))
        table, directory = packing
        snapshot, archive = _code.pack(directory, code_max_mib << 20)
        with archive:
            await self.upload_code(snapshot, archive)
        text = json.dumps(_code.with_snapshot(table, snapshot))
        return await self._unary("ParseTrainingConfig", rq.parse_json_request(text))

    async def upload_code(self, snapshot: Dict, archive) -> bool:
        try:
            held = await self._unary("GetCode", ts.GetCodeRequest(sha256=snapshot["sha256"]))
            if held.size_bytes == snapshot["size_bytes"]:
                return False
        except CohortError as e:
            if e.reason != "CODE_NOT_FOUND":
                raise
        stub = (await self._connect())["training"]
        try:
            await stub.UploadCode(_code.upload_requests(snapshot, archive),
                                  metadata=self._settings.metadata)
        except grpc.RpcError as e:
            raise CohortError.from_rpc_error(e) from None
        return True

    async def submit(self, config: rq.ConfigLike, gpus: rq.GpusLike = None, *, name: str = "",
                     priority_class: str = "", labels: Optional[Dict[str, str]] = None,
                     request_id: Optional[str] = None, max_restarts: Optional[int] = None,
                     borrow: Optional[bool] = None, queue: bool = True, code=None,
                     code_max_mib: int = 64) -> training_pb2.Training:
        config = await self.parse_config(config, code=code, code_max_mib=code_max_mib)
        request = rq.create_request(config, gpus, name=name,
                                    priority_class=priority_class, labels=labels,
                                    request_id=request_id, max_restarts=max_restarts,
                                    borrow=borrow, queue=queue)
        return await self._unary("CreateTraining", request)

    async def sweep(self, config: rq.ConfigLike, grid: Dict[str, Sequence], *,
                    name: Optional[str] = None, gpus: rq.GpusLike = None,
                    priority_class: str = "", labels: Optional[Dict[str, str]] = None
                    ) -> List[training_pb2.Training]:
        name, plan = rq.sweep_plan(rq.base_text(config), grid, name, labels)
        configs = [await self._unary("ParseTrainingConfig", rq.parse_json_request(text))
                   for text, *_ in plan]
        return [await self._unary("CreateTraining", rq.create_request(
                    parsed, gpus, name=display, priority_class=priority_class, labels=tags,
                    request_id=request_id))
                for parsed, (_, tags, display, request_id) in zip(configs, plan)]

    async def create_sweep(self, config: rq.ConfigLike, space: rq.SpaceLike, *, objective: str,
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
            await self.parse_config(config), space, objective=objective, maximize=maximize,
            searcher=searcher, max_trials=max_trials, max_concurrent=max_concurrent,
            max_gpu_hours=max_gpu_hours, gpus=gpus, seed=seed,
            priority_class=priority_class, name=name, request_id=request_id, eta=eta)
        return await self._unary("CreateSweep", request, service="sweep")

    async def get_sweep(self, sweep_id: str) -> sweep_pb2.Sweep:
        """A sweep with its trials, their params and objective values, and the best."""
        return await self._unary("GetSweep", ss.GetSweepRequest(id=sweep_id), service="sweep")

    async def list_sweeps(self, page_size: int = 100) -> AsyncIterator[sweep_pb2.Sweep]:
        """Every sweep the caller's team may see, newest first."""
        token = ""
        while True:
            page = await self._unary("ListSweeps", ss.ListSweepsRequest(
                page_size=page_size, page_token=token), service="sweep")
            for sweep in page.sweeps:
                yield sweep
            token = page.next_page_token
            if not token:
                return

    async def cancel_sweep(self, sweep_id: str, reason: str = "") -> sweep_pb2.Sweep:
        """Cancels a sweep and every trial of it not ended."""
        return await self._unary("CancelSweep", ss.CancelSweepRequest(id=sweep_id, reason=reason),
                           service="sweep")

    async def wait_sweep(self, sweep_id: str, poll_s: float = 1.0) -> sweep_pb2.Sweep:
        """The sweep once it ended (SUCCEEDED, FAILED or CANCELLED)."""
        while True:
            sweep = await self.get_sweep(sweep_id)
            if sweep.state != sweep_pb2.Sweep.RUNNING:
                return sweep
            await asyncio.sleep(poll_s)

    async def get(self, training_id: str) -> training_pb2.Training:
        return await self._unary("GetTraining", ts.GetTrainingRequest(id=training_id))

    async def list(self, *, states: Optional[Sequence[Union[str, int]]] = None,
                   labels: Optional[Dict[str, str]] = None, team: Optional[str] = None,
                   page_size: int = 100) -> AsyncIterator[training_pb2.Training]:
        token = ""
        while True:
            page = await self._unary("ListTrainings",
                                     rq.list_request(states, labels, team, page_size, token))
            for training in page.trainings:
                yield training
            token = page.next_page_token
            if not token:
                return

    async def cancel(self, training_id: str, reason: str = "") -> training_pb2.Training:
        return await self._unary("CancelTraining",
                                 ts.CancelTrainingRequest(id=training_id, reason=reason))

    async def report(self, training_id: str, *, omit_metrics: bool = False
                     ) -> training_report_pb2.TrainingReport:
        return await self._unary(
            "GetTrainingReport",
            ts.GetTrainingReportRequest(id=training_id, omit_metrics=omit_metrics))

    async def watch(self, training_id: str, *, after_sequence: int = 0,
                    rank_stats: bool = False
                    ) -> AsyncIterator[training_events_pb2.TrainingEvent]:
        last, failing_since = after_sequence, None
        while True:
            lagged = False
            try:
                async for event in self._stream("WatchTraining",
                                                rq.watch_request(training_id, last, rank_stats)):
                    failing_since = None
                    if event.WhichOneof("event") == "lagged":
                        lagged = True
                        break
                    last = event.sequence
                    yield event
                if not lagged:
                    return
            except CohortError as error:
                if error.code != grpc.StatusCode.UNAVAILABLE:
                    raise
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > RESUME_FOR_S:
                    raise
                await self.close()
                await asyncio.sleep(0.5)

    async def wait(self, training_id: str) -> training_pb2.Training:
        async for _ in self.watch(training_id):
            pass
        return await self.get(training_id)

    async def logs(self, training_id: str, *, follow: bool = True, tail: int = 0,
                   ranks: Optional[Sequence[int]] = None, attempt: Optional[int] = None
                   ) -> AsyncIterator[training_logs_pb2.LogLine]:
        async for line in self._stream(
                "WatchLogs", rq.logs_request(training_id, follow, tail, ranks, attempt)):
            yield line

    async def download_checkpoint(self, training_id: str, dest: Union[str, Path], *,
                                  step: Optional[int] = None, format: str = "native",
                                  best: bool = False) -> List[Path]:
        writer = rq.CheckpointWriter(dest)
        async for chunk in self._stream("DownloadCheckpoint",
                                        rq.download_request(training_id, step, format, best)):
            writer.add(chunk)
        return writer.finish()[1]
