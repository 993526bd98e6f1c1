"""The requests both clients send, built one way."""

import itertools
import json
import time
import uuid
from pathlib import Path
from typing import Dict, Iterable, Optional, Sequence, Tuple, Union

from ._pb.cohort.v1 import checkpoint_pb2, config_pb2, training_pb2
from ._pb.cohort.v1 import training_logs_pb2, training_service_pb2 as ts
from ._pb.cohort.v1 import sweep_pb2, sweep_service_pb2 as ss

State = training_pb2.Training.State
#: The states a training never leaves.
FINAL_STATES = frozenset({State.SUCCEEDED, State.FAILED, State.CANCELLED})

ConfigLike = Union[str, Path, config_pb2.TrainingConfig]
#: A count, GPU uuids, a ``(min, max)`` range (an elastic training), or None (auto).
GpusLike = Union[None, int, Tuple[int, int], Sequence[str]]


def config_source(config: ConfigLike):
    """A TrainingConfig as given, or the TOML text of a path or string: a
    ``Path`` (or a string naming an existing file) is read; any other
    string is the TOML itself."""
    if isinstance(config, config_pb2.TrainingConfig):
        return config
    if isinstance(config, Path) or (isinstance(config, str) and "\n" not in config
                                    and Path(config).is_file()):
        return Path(config).read_text()
    if isinstance(config, str):
        return config
    raise TypeError(f"config must be a path, TOML text or a TrainingConfig, not {type(config)}")


def parse_request(text: str) -> ts.ParseTrainingConfigRequest:
    return ts.ParseTrainingConfigRequest(
        text=text, format=ts.ParseTrainingConfigRequest.FORMAT_TOML)


def gpu_request(gpus: GpusLike, queue: bool = True) -> training_pb2.GpuRequest:
    request = training_pb2.GpuRequest(queue=queue)
    if gpus is None:
        request.auto.SetInParent()
    elif isinstance(gpus, bool):
        raise TypeError("gpus is a count, a (min, max) range or a list of GPU ids")
    elif isinstance(gpus, int):
        request.count = gpus
    elif isinstance(gpus, tuple) and len(gpus) == 2 and all(
            isinstance(n, int) and not isinstance(n, bool) for n in gpus):
        request.min_count, request.max_count = gpus
    else:
        request.gpu_ids.ids.extend(gpus)
    return request


def create_request(config: config_pb2.TrainingConfig, gpus: GpusLike, *, name: str = "",
                   priority_class: str = "", labels: Optional[Dict[str, str]] = None,
                   request_id: Optional[str] = None, max_restarts: Optional[int] = None,
                   borrow: Optional[bool] = None, queue: bool = True) -> ts.CreateTrainingRequest:
    """A CreateTraining request; its request id (a fresh UUID unless given)
    makes a retry return the training the first attempt created."""
    request = ts.CreateTrainingRequest(
        request_id=request_id or str(uuid.uuid4()), config=config,
        gpus=gpu_request(gpus, queue), display_name=name,
        priority_class=priority_class, labels=labels or {})
    if max_restarts is not None:
        request.max_restarts = max_restarts
    if borrow is not None:
        request.borrow = borrow
    return request


def states(values: Optional[Iterable[Union[str, int]]]):
    """State names (``"RUNNING"``) or numbers as the enum's numbers."""
    out = []
    for value in values or ():
        out.append(State.Value(value.upper()) if isinstance(value, str) else int(value))
    return out


def list_request(states_, labels, team, page_size, page_token="") -> ts.ListTrainingsRequest:
    return ts.ListTrainingsRequest(page_size=page_size, page_token=page_token,
                                   states=states(states_), labels=labels or {}, team=team or "")


def watch_request(training_id: str, after: int, rank_stats: bool) -> ts.WatchTrainingRequest:
    return ts.WatchTrainingRequest(id=training_id, after_sequence=after,
                                   include_rank_stats=rank_stats)


def logs_request(training_id, follow, tail, ranks, attempt) -> training_logs_pb2.WatchLogsRequest:
    request = training_logs_pb2.WatchLogsRequest(
        training_id=training_id, follow=follow, tail=tail, ranks=list(ranks or ()))
    if attempt is not None:
        request.attempt = attempt
    return request


FORMATS = {
    "native": checkpoint_pb2.CHECKPOINT_FORMAT_NATIVE,
    "saelens": checkpoint_pb2.CHECKPOINT_FORMAT_SAELENS,
}


def download_request(training_id, step, fmt, best) -> ts.DownloadCheckpointRequest:
    if fmt not in FORMATS:
        raise ValueError(f"format is one of {sorted(FORMATS)}, not {fmt!r}")
    request = ts.DownloadCheckpointRequest(training_id=training_id, format=FORMATS[fmt], best=best)
    if step is not None:
        request.step = step
    return request


class CheckpointWriter:
    """Writes DownloadCheckpoint's chunks into ``dest`` (a directory made if
    needed): files come one after another, each in order. A file's name
    with a directory in it, or a chunk out of order, is refused."""

    def __init__(self, dest: Union[str, Path]):
        self.dest = Path(dest)
        self.dest.mkdir(parents=True, exist_ok=True)
        self.step: Optional[int] = None
        self.files = []
        self._open = None
        self._name = None
        self._written = 0
        self._size = 0

    def add(self, chunk) -> None:
        name = chunk.file
        if not name or "/" in name or "\\" in name or name in (".", ".."):
            raise ValueError(f"the coordinator sent a file name that is not plain: {name!r}")
        if name != self._name:
            self._close()
            if (self.dest / name) in self.files:
                raise ValueError(f"{name}: sent twice")
            self._open = open(self.dest / name, "wb")
            self._name, self._written = name, 0
            self.files.append(self.dest / name)
        self._size = chunk.file_size
        if chunk.offset != self._written:
            raise ValueError(f"{name}: chunk at {chunk.offset}, expected {self._written}")
        self._open.write(chunk.data)
        self._written += len(chunk.data)
        self.step = chunk.step

    def _close(self) -> None:
        if self._open is not None:
            self._open.close()
            self._open = None
            if self._written != self._size:
                raise ValueError(f"{self._name}: {self._written} of {self._size} bytes came")

    def finish(self):
        self._close()
        return self.step, self.files


#: The most trainings one sweep submits (as `cohort train sweep`).
MAX_GRID = 256


def _toml(text: str) -> dict:
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib
    return tomllib.loads(text)


def _label_value(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def sweep_plan(base_text: str, grid: Dict[str, Sequence], name: Optional[str],
               labels: Optional[Dict[str, str]]):
    """What `cohort train sweep` submits, as (config JSON, labels, display
    name, request id) per combination, first key slowest: the base config
    with each combination's dotted keys set, labelled ``sweep=NAME`` and
    ``KEY=VALUE``; the request id ``NAME/i`` makes a retried sweep create
    nothing twice."""
    if not grid:
        raise ValueError("grid names no key to sweep")
    for key, values in grid.items():
        if not key or any(not part for part in key.split(".")):
            raise ValueError(f"{key!r}: a key is a dotted path such as model.k")
        if isinstance(values, (str, bytes)) or not list(values):
            raise ValueError(f"{key}: give a list of values")
    combos = list(itertools.product(*[[(k, v) for v in vs] for k, vs in grid.items()]))
    if len(combos) > MAX_GRID:
        raise ValueError(f"the grid has {len(combos)} trainings; at most {MAX_GRID} per sweep")
    name = name or f"sweep-{int(time.time())}"
    base = _toml(base_text)
    plan = []
    for i, combo in enumerate(combos):
        config = json.loads(json.dumps(base))
        for key, value in combo:
            *parents, leaf = key.split(".")
            at = config
            for part in parents:
                if not isinstance(at.get(part), dict):
                    at[part] = {}
                at = at[part]
            at[leaf] = value
        tags = dict(labels or {})
        tags.update({key: _label_value(value) for key, value in combo})
        tags["sweep"] = name
        display = " ".join(f"{key.rsplit('.', 1)[-1]}={_label_value(v)}" for key, v in combo)
        plan.append((json.dumps(config), tags, f"{name} {display}", f"{name}/{i}"))
    return name, plan


def parse_json_request(text: str) -> ts.ParseTrainingConfigRequest:
    return ts.ParseTrainingConfigRequest(
        text=text, format=ts.ParseTrainingConfigRequest.FORMAT_JSON)


def base_text(config: "ConfigLike") -> str:
    source = config_source(config)
    if not isinstance(source, str):
        raise TypeError("a sweep's base config is a TOML path or text")
    return source


#: A search space: ``{"model.k": {"int_uniform": [8, 32]}, ...}``, or a
#: TOML file or text of that shape (docs/sweeps.md).
SpaceLike = Union[str, Path, Dict[str, Dict[str, Sequence]]]

_RANGES = ("uniform", "log_uniform", "int_uniform")


def space_parameters(space: SpaceLike) -> list:
    """A space as the API's SweepParameters; the coordinator checks the
    values (and names the parameter it refuses)."""
    if isinstance(space, Path) or (isinstance(space, str) and "\n" not in space
                                   and Path(space).is_file()):
        space = _toml(Path(space).read_text())
    elif isinstance(space, str):
        space = _toml(space)
    params = []
    for key, spec in space.items():
        if not isinstance(spec, dict) or len(spec) != 1:
            raise ValueError(f"space[{key}]: one of uniform, log_uniform, int_uniform, choice")
        (kind, args), = spec.items()
        parameter = sweep_pb2.SweepParameter(key=key)
        if kind in _RANGES:
            low, high = args
            bounds = getattr(parameter, kind)
            bounds.low, bounds.high = float(low), float(high)
        elif kind == "choice":
            parameter.choice.extend(list(args))
        else:
            raise ValueError(f"space[{key}]: {kind!r} is not a distribution")
        params.append(parameter)
    return params


def create_sweep_request(config: config_pb2.TrainingConfig, space: SpaceLike, *,
                         objective: str, maximize: Optional[bool], searcher: str,
                         max_trials: int, max_concurrent: int, max_gpu_hours: float,
                         gpus: GpusLike, seed: int, priority_class: str, name: str,
                         request_id: Optional[str], eta: float = 0.0) -> ss.CreateSweepRequest:
    """A CreateSweep request (a fresh request id unless given)."""
    direction = sweep_pb2.SweepObjective.DIRECTION_UNSPECIFIED
    if maximize is not None:
        direction = (sweep_pb2.SweepObjective.MAXIMIZE if maximize
                     else sweep_pb2.SweepObjective.MINIMIZE)
    searchers = {"random": sweep_pb2.RANDOM, "grid": sweep_pb2.GRID,
                 "asha": sweep_pb2.ASHA, "median": sweep_pb2.MEDIAN}
    if searcher not in searchers:
        raise ValueError(f"searcher must be one of {sorted(searchers)}, not {searcher!r}")
    return ss.CreateSweepRequest(
        config=config, space=space_parameters(space), searcher=searchers[searcher],
        seed=seed, objective=sweep_pb2.SweepObjective(metric=objective, direction=direction),
        max_trials=max_trials, max_concurrent=max_concurrent, max_gpu_hours=max_gpu_hours,
        gpus=gpu_request(gpus), priority_class=priority_class, display_name=name,
        request_id=request_id or str(uuid.uuid4()), eta=eta)
