"""A program's code directory, packed and uploaded as ``cohort train
submit`` does (docs/programs.md, "Code that travels with the training").

The directory becomes a deterministic ``.tar.gz`` (sorted, no times or
owners): hidden files included, ``.git`` left out, ``.gitignore`` and
``.cohortignore`` files honoured (in the directory and its parents), links
kept only when they stay inside it. The coordinator keeps it once per
sha256; agents unpack it read-only and run every rank from it.
"""

import gzip
import hashlib
import os
import stat
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import BinaryIO, Dict, List, Optional, Tuple

import grpc
import pathspec

from .errors import CohortError

#: The default cap on a directory's file contents (as the CLI's --code-max-mib).
DEFAULT_MAX_BYTES = 64 << 20
IGNORE_FILES = (".gitignore", ".cohortignore")
#: Bytes per UploadCode message.
CHUNK = 1 << 20


def _refused(reason: str, message: str) -> CohortError:
    return CohortError(grpc.StatusCode.INVALID_ARGUMENT, f"program.code: {message}", reason,
                       fields=["program.code"])


def _spec(directory: Path) -> Optional[pathspec.GitIgnoreSpec]:
    lines: List[str] = []
    for name in IGNORE_FILES:
        f = directory / name
        if f.is_file():
            lines += f.read_text(errors="replace").splitlines()
    return pathspec.GitIgnoreSpec.from_lines(lines) if lines else None


class _Rules:
    """The ignore files that apply, each with the directory it speaks for."""

    def __init__(self, root: Path):
        self.specs: List[Tuple[Path, pathspec.GitIgnoreSpec]] = []
        for parent in reversed(root.parents):
            spec = _spec(parent)
            if spec:
                self.specs.append((parent, spec))

    def ignored(self, path: Path, is_dir: bool) -> bool:
        """The last ignore file with a say decides (a deeper one wins)."""
        verdict = False
        for base, spec in self.specs:
            try:
                rel = path.relative_to(base).as_posix()
            except ValueError:
                continue
            include = spec.check_file(rel + "/" if is_dir else rel).include
            if include is not None:
                verdict = include
        return verdict


def _walk(root: Path) -> List[Tuple[str, Path, os.stat_result]]:
    """Every entry to pack: (archive name, path, lstat), sorted by name."""
    rules = _Rules(root)
    found = []

    def visit(directory: Path) -> None:
        with os.scandir(directory) as entries:
            for entry in entries:
                path = Path(entry.path)
                st = entry.stat(follow_symlinks=False)
                is_dir = stat.S_ISDIR(st.st_mode)
                if entry.name == ".git" or rules.ignored(path, is_dir):
                    continue
                found.append((path.relative_to(root).as_posix(), path, st))
                if is_dir:
                    spec = _spec(path)
                    if spec:
                        rules.specs.append((path, spec))
                    visit(path)
                    if spec:
                        rules.specs.pop()

    spec = _spec(root)
    if spec:
        rules.specs.append((root, spec))
    visit(root)
    return sorted(found, key=lambda e: e[0].encode())


def _check(root: Path, entries, max_bytes: int) -> None:
    files = [(name, st.st_size) for name, _, st in entries if stat.S_ISREG(st.st_mode)]
    total = sum(size for _, size in files)
    if total > max_bytes:
        largest = ", ".join(f"{name} ({size} bytes)" for name, size in
                            sorted(files, key=lambda f: -f[1])[:5])
        raise _refused("CODE_TOO_LARGE", f"{root} holds {total} bytes, over the cap of "
                       f"{max_bytes >> 20} MiB; the largest: {largest} "
                       "(leave them out with a .cohortignore)")
    for name, path, st in entries:
        mode = st.st_mode
        if stat.S_ISLNK(mode):
            target = os.readlink(path)
            inside = os.path.normpath(os.path.join(os.path.dirname(name), target))
            if os.path.isabs(target) or inside == ".." or inside.startswith("../"):
                raise _refused("CODE_SYMLINK_LEAVES",
                               f"{name} links to {target}, outside the directory")
        elif not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise _refused("CODE_UNSUPPORTED_FILE", f"{name} is not a file, a directory or a link")


def _tar(entries, out: BinaryIO) -> None:
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
            for name, path, st in entries:
                info = tarfile.TarInfo(name)
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                if stat.S_ISDIR(st.st_mode):
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
                elif stat.S_ISLNK(st.st_mode):
                    info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, os.readlink(path)
                    tar.addfile(info)
                else:
                    info.mode = 0o755 if st.st_mode & 0o111 else 0o644
                    info.size = st.st_size
                    with open(path, "rb") as f:
                        tar.addfile(info, f)


def git_state(root: Path) -> Tuple[Optional[str], bool]:
    """HEAD's commit and whether ``git status`` shows changes under root;
    (None, False) outside a git work tree or without git."""
    def git(*args) -> Optional[str]:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                                  text=True, timeout=30, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "--verify", "HEAD")
    if not commit:
        return None, False
    status = git("status", "--porcelain", "--untracked-files=normal", "--", ".")
    return commit, bool(status)


def pack(root, max_bytes: int = DEFAULT_MAX_BYTES) -> Tuple[Dict, BinaryIO]:
    """Packs ``root``: the snapshot (``sha256``, ``size_bytes``, ``files``,
    ``git_commit``, ``git_dirty``) and the archive, a temporary file read
    from its start. Raises CohortError (INVALID_ARGUMENT, with the reason
    CODE_TOO_LARGE, CODE_SYMLINK_LEAVES or CODE_UNSUPPORTED_FILE) for a
    directory that cannot travel."""
    root = Path(root).resolve()
    if not root.is_dir():
        raise _refused("CODE_NOT_A_DIRECTORY", f"{root} is not a directory")
    entries = _walk(root)
    _check(root, entries, max_bytes)
    archive = tempfile.TemporaryFile()
    _tar(entries, archive)
    size = archive.tell()
    archive.seek(0)
    digest = hashlib.sha256()
    for block in iter(lambda: archive.read(CHUNK), b""):
        digest.update(block)
    archive.seek(0)
    commit, dirty = git_state(root)
    snapshot = {"sha256": digest.hexdigest(), "size_bytes": size,
                "files": sum(1 for _, _, st in entries if not stat.S_ISDIR(st.st_mode))}
    if commit:
        snapshot["git_commit"], snapshot["git_dirty"] = commit, dirty
    return snapshot, archive


def upload_requests(snapshot: Dict, archive: BinaryIO):
    """UploadCode's messages: the header, then the bytes in 1 MiB chunks."""
    from ._pb.cohort.v1 import training_service_pb2 as ts
    yield ts.UploadCodeRequest(header=ts.CodeHeader(sha256=snapshot["sha256"],
                                                    size_bytes=snapshot["size_bytes"]))
    for block in iter(lambda: archive.read(CHUNK), b""):
        yield ts.UploadCodeRequest(data=block)


def code_dir(table: Dict, config_file: Optional[Path], code: Optional[os.PathLike]
             ) -> Optional[Path]:
    """The directory to pack: ``code`` (as given), or the config's
    ``[program] code`` path, which must lie in the config file's directory
    tree (the working directory's for TOML text)."""
    if code is not None:
        return Path(code).resolve()
    value = table.get("program", {}).get("code")
    if not isinstance(value, str):
        return None
    base = (config_file.parent if config_file else Path(".")).resolve()
    directory = (base / value).resolve()
    if directory != base and base not in directory.parents:
        raise _refused("INVALID_CONFIG",
                       f"{value} ({directory}) lies outside the config file's directory {base}")
    return directory


def with_snapshot(table: Dict, snapshot: Dict) -> Dict:
    """The config with ``[program] code`` naming the uploaded snapshot."""
    program = dict(table.get("program", {}))
    program["code"] = snapshot
    return {**table, "program": program}


def plan(config, source: str, code: Optional[os.PathLike]) -> Optional[Tuple[Dict, Path]]:
    """For a TOML config (``source``, read from ``config`` when that named a
    file): its table and the directory to pack, or None when there is none."""
    from ._requests import _toml
    table = _toml(source)
    named = isinstance(config, Path) or (isinstance(config, str) and source is not config)
    directory = code_dir(table, Path(config) if named else None, code)
    if directory is None:
        return None
    if "program" not in table:
        raise _refused("INVALID_CONFIG", "code is for program trainings ([program])")
    return table, directory
