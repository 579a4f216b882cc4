"""Where a sweep's results live: a local folder, or a URI that pyarrow's file systems accept (s3://, gs://).

A results root or an experiment folder is a `Path` (local) or a `Location` (file system,
scheme-less path, scheme). Ray Tune gets the Location's file system and path (`ray_storage`,
`prepare_restore`) and writes trials, checkpoints and experiment state there itself; sweeper.run
writes sweep.json through `create_experiment`. The report code reads local files, so `report_inputs`
copies an experiment's small files (REPORT_INPUTS: sweep.json, a grid's trials.json, params.json,
result.json, error.*, the virtual_points.npz of MUR checkpoints, live.json; with them Tune's
experiment_state-*.json; never the weights) into a local cache folder (sweeper.report.report_at
builds the report there and uploads what it wrote with `push`). Endpoint and credentials: the
standard settings of each file system (AWS: environment, profile, instance role, AWS_ENDPOINT_URL_S3
for S3-compatible servers; GCS: application default credentials); nothing here.

`check` is the pre-flight check before Ray starts: an unknown scheme, a missing bucket or refused
credentials is a StorageError whose one-line message names the fix; nothing is written then.

    python -c "from sweeper.storage import check; print(check('s3://my-bucket/results'))"
    python -m sweeper.report s3://my-bucket/results/ablation_radius-20250101-120000-3f9a1c

Local cache: $VBI_MUR_CACHE, else ~/.cache/vbi-mur-sweeper (experiments/<scheme>/<bucket>/<prefix>).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from trainables import remote
from trainables.files import VIRTUAL_POINTS, atomic_write, one_line
from trainables.remote import is_uri

TRIALS_FILE = "trials.json"        # a grid's trial configs, in order (trial_index): what --resume rebuilds the grid from
# What the report reads from an experiment folder (sweeper/analysis/aggregate.py, sweeper/report.py);
# trials.json is the plan that the summary's n_planned and n_missing count against (analysis/planned.py)
REPORT_INPUTS = ("sweep.json", TRIALS_FILE, "params.json", "result.json", "error.txt", "error.pkl", VIRTUAL_POINTS,
                 "live.json")
EXPERIMENT_STATE = re.compile(r"experiment_state-(.*)\.json")  # Tune's state of one driver run; group 1: its start time
TRIAL_DIR_PREFIX = "trial_"  # a trial's folder: trial_<Tune's trial id> (sweeper/driver/tuner.py's trial_dirname)
TUNER_STATE = "tuner.pkl"          # what Tuner.restore needs (Tune writes it when the Tuner is built)
OPTUNA_DB = "optuna.db"            # hpo's study: SQLite, so on the driver's disk, copied beside the results
PREFLIGHT_RETRY_S = 5.0            # check()'s retry budget (the run's: remote.retry_budget())


def grid_meta(meta: dict) -> bool:
    """sweep.json `meta` describes a fixed list of trials (neither a search nor --seeds auto)."""
    return not (meta.get("search") or meta.get("max_seeds"))


class StorageError(ValueError):
    """A results location that cannot be used; the one-line message names the fix."""


@dataclass(frozen=True)
class Location:
    """A folder behind a URI: `str()` is the URI, `path` what the file system (and Ray Tune) calls it."""
    fs: object = field(compare=False, repr=False)  # pyarrow.fs.FileSystem
    path: str                                      # scheme-less: "bucket/results/exp"
    scheme: str                                    # "s3", "gs", ...

    def __str__(self) -> str:
        return f"{self.scheme}://{self.path}"

    def __truediv__(self, name: str) -> "Location":
        return Location(self.fs, f"{self.path}/{name}", self.scheme)

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def parent(self) -> "Location":
        return Location(self.fs, self.path.rsplit("/", 1)[0], self.scheme)

    @property
    def bucket(self) -> str:
        return self.path.split("/", 1)[0]


Folder = Path | Location


# ---------------------------------------------------------------- resolving and the pre-flight check

def resolve(where: str | Path) -> Folder:
    """A local path (or file:// URI) as an absolute Path; any other URI as a Location."""
    if not is_uri(where):
        return Path(where).expanduser().resolve()
    uri = str(where)
    try:
        remote.retry_budget()
    except ValueError as e:
        raise StorageError(str(e)) from None
    try:
        fs, path = remote.resolve(uri)
    except OSError as e:  # e.g. hdfs:// without its Java libraries, a bucket whose region cannot be found
        raise StorageError(explain(e, uri)) from None
    except Exception as e:  # pyarrow.lib.ArrowInvalid: a scheme no pyarrow file system knows
        if "Unrecognized filesystem type" in str(e):
            raise StorageError(f"{uri}: unsupported scheme {remote.scheme(uri)}://; use a local folder, "
                               f"s3://BUCKET/PREFIX or gs://BUCKET/PREFIX") from None
        raise StorageError(f"{uri} is not a usable URI ({one_line(e)}); use a local folder, "
                           f"s3://BUCKET/PREFIX or gs://BUCKET/PREFIX") from None
    import pyarrow.fs as pafs

    if isinstance(fs, pafs.LocalFileSystem):
        return Path(path)
    path = path.strip("/")
    if not path:
        raise StorageError(f"{uri} names no bucket; use {remote.scheme(uri)}://BUCKET/PREFIX")
    return Location(fs, path, remote.scheme(uri))


def nearest_existing(path: Path) -> Path:
    """`path` itself where it exists, else its nearest existing parent (where a folder would be made)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _write_probe(folder: Folder) -> None:
    """Write a small file into `folder` and delete it again: OSError where the folder does not take one.
    In a bucket the file's name has a random part besides the process id (drivers on other machines
    may have the same id); a bucket folder comes through `quick`, for the pre-flight's short retries."""
    if isinstance(folder, Path):
        probe = folder / f".write-test-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    else:
        probe = folder / f".write-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        write_bytes(probe, b"ok")
        folder.fs.delete_file(probe.path)


def check(where: str | Path, create: bool = True) -> Folder:
    """The results root, checked before Ray starts: a local folder is created and must take a file
    (`create=False`, a dry run: it, or the folder it would be made in, must be writable, and nothing is
    made); a bucket must exist and take (and give back) a small object. StorageError with the fix if not;
    a missing bucket or refused credentials leaves nothing written."""
    root = resolve(where)
    if isinstance(root, Path) and not create:
        here = nearest_existing(root)
        if not here.is_dir() or not os.access(here, os.W_OK | os.X_OK):
            raise StorageError(f"storage folder {root} cannot be made ({here} is "
                               f"{'not writable' if here.is_dir() else 'a file'}); pass --storage with a writable folder")
        return root
    if isinstance(root, Path):
        try:
            root.mkdir(parents=True, exist_ok=True)
            _write_probe(root)
        except OSError as e:
            raise StorageError(f"storage folder {root} cannot be written ({e.strerror}); "
                               f"pass --storage with a writable folder") from None
        return root
    import pyarrow.fs as pafs

    # a bucket that does not answer at the start is bad input: a short retry budget, not the run's
    quick_root = quick(root)
    try:
        # S3: HeadBucket (s3:ListBucket) tells a missing bucket apart; elsewhere the probe's error does
        # (a GCS role with object rights only, roles/storage.objectAdmin, may not read bucket metadata)
        if root.scheme == "s3" and quick_root.fs.get_file_info(root.bucket).type == pafs.FileType.NotFound:
            raise StorageError(missing_bucket(root))
        _write_probe(quick_root)
    except OSError as e:
        raise StorageError(explain(e, str(root))) from None
    return root


def check_resumable(exp: Folder) -> None:
    """An experiment folder that --resume will continue, checked before Ray starts: Tune writes its
    state into it and each trial into its own subfolder, so the folder and (locally) each subfolder
    must take a file. StorageError naming the folder and the fix if not."""
    try:
        if isinstance(exp, Path):
            for d in (exp, *sorted(p for p in exp.iterdir() if p.is_dir())):
                _write_probe(d)
        else:
            _write_probe(quick(exp))
    except OSError as e:
        where = Path(e.filename).parent if isinstance(exp, Path) and e.filename else exp
        why = e.strerror if isinstance(exp, Path) and e.strerror else explain(e, str(exp))
        raise StorageError(f"experiment folder {where} cannot be written ({why}); --resume "
                           f"writes Tune's state and the trials' results into it: make it writable, or copy "
                           f"the experiment folder to a writable place and resume the copy") from None


def where_keys_go(uri: str) -> str:
    """Where the credentials for a bucket URI belong (never in the URI itself)."""
    s = remote.scheme(uri)
    if s == "s3":
        return ("give the key through the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) or an AWS "
                "profile (AWS_PROFILE) on every node")
    if s in ("gs", "gcs"):
        return ("give this machine application default credentials (`gcloud auth application-default login`) "
                "or a service account")
    return "give the credentials through the file system's own settings (environment, profile)"


def quick(f: Folder) -> Folder:
    """The same folder on a file system that retries for the pre-flight's PREFLIGHT_RETRY_S only, for
    reads before Ray starts (a bucket that does not answer is bad input, within seconds)."""
    if isinstance(f, Path):
        return f
    return Location(remote.with_retry_budget(f.fs, PREFLIGHT_RETRY_S), f.path, f.scheme)


def missing_bucket(loc: Location) -> str:
    make = (f"`gcloud storage buckets create gs://{loc.bucket} --location=REGION`" if loc.scheme in ("gs", "gcs")
            else f"`aws s3 mb s3://{loc.bucket}`" if loc.scheme == "s3" else "create it")
    return f"bucket {loc.bucket!r} of {loc} does not exist; create it ({make}) or correct the name"


def explain(e: BaseException, uri: str) -> str:
    """One line for a file system's error: refused credentials, a missing bucket, or as it came."""
    msg, low = one_line(e), str(e).lower()
    s = remote.scheme(uri)
    # the status codes as whole numbers: a port or a byte count in the message may hold their digits
    if any(w in low for w in ("access_denied", "access denied", "invalid_access_key", "accessdenied", "forbidden",
                              "signaturedoesnotmatch", "signature_does_not_match", "expired", "permission",
                              "unauthorized", "unauthenticated", "oauth2", "credentials")) \
            or re.search(r"(?<!\d)40[13](?!\d)", low):
        fix = ("give this machine credentials that may read and write it: application default credentials "
               "(`gcloud auth application-default login`) or the node's service account with "
               "roles/storage.objectAdmin; test with `gcloud storage ls " + uri + "`") if s in ("gs", "gcs") else \
              ("give this machine credentials that may read and write it (AWS_ACCESS_KEY_ID and "
               "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or an instance profile; AWS_ENDPOINT_URL_S3 for an "
               "S3-compatible server); test with `aws s3 ls " + uri + "/`")
        return f"{uri}: access refused ({msg}); {fix}"
    if re.search(r"no_such_bucket|nosuchbucket|bucket '[^']*' not found|bucket does not exist", low):
        bucket = uri.split("://", 1)[-1].split("/", 1)[0]
        return missing_bucket(Location(None, bucket, s))
    return f"{uri} cannot be used ({msg}); check the URI, the network and the credentials"


# ---------------------------------------------------------------- files

def is_file(f: Folder) -> bool:
    if isinstance(f, Path):
        return f.is_file()
    import pyarrow.fs as pafs

    with _explained(f):
        return f.fs.get_file_info(f.path).type == pafs.FileType.File


def read_text(f: Folder) -> str:
    if isinstance(f, Path):
        return f.read_text()
    with _explained(f), f.fs.open_input_stream(f.path) as s:
        return s.read().decode()


def read_bytes(f: Folder) -> bytes:
    if isinstance(f, Path):
        return f.read_bytes()
    with _explained(f), f.fs.open_input_stream(f.path) as s:
        return s.read()


def listdir(folder: Folder) -> list[Folder]:
    """The files directly in folder (not its subfolders), sorted by name."""
    if isinstance(folder, Path):
        return sorted(p for p in folder.iterdir() if p.is_file())
    import pyarrow.fs as pafs

    with _explained(folder):
        infos = folder.fs.get_file_info(pafs.FileSelector(folder.path, recursive=False, allow_not_found=True))
    return sorted((folder / i.base_name for i in infos if i.type == pafs.FileType.File), key=lambda f: f.name)


def move(src: Folder, dest: Folder) -> None:
    """Rename a file (in a bucket: a copy, then the source deleted)."""
    if isinstance(src, Path):
        os.replace(src, dest)
        return
    with _explained(src):
        src.fs.move(src.path, dest.path)


@contextlib.contextmanager
def _explained(f: Location):
    """A file system's OSError as a one-line StorageError (refused credentials, missing bucket, ...)."""
    try:
        yield
    except OSError as e:
        raise StorageError(explain(e, str(f))) from None


def write_bytes(f: Folder, data: bytes) -> None:
    """Atomic enough: locally a temporary file renamed into place; in a bucket one upload of the whole
    content (an object appears complete or not at all)."""
    if isinstance(f, Path):
        atomic_write(f, lambda tmp: Path(tmp).write_bytes(data))
        return
    with f.fs.open_output_stream(f.path) as out:
        out.write(data)


def write_text(f: Folder, text: str) -> None:
    write_bytes(f, text.encode())


def remove(f: Folder) -> None:
    """Delete a file (one already gone is no error locally)."""
    if isinstance(f, Path):
        f.unlink(missing_ok=True)
        return
    with _explained(f):
        f.fs.delete_file(f.path)


STAMP = re.compile(r"-(\d{8}-\d{6})(?:-[0-9a-f]+)?$")  # <sweep>-<YYYYmmdd-HHMMSS>[-<suffix>]


def experiment_name(sweep: str, t: float) -> str:
    """A new experiment folder's name: <sweep>-<YYYYmmdd-HHMMSS>-<6 random hex digits>, the local time `t`.
    Two drivers started in the same second into one root get different folders: a bucket has no
    atomic "create if absent", so the suffix is random rather than the first free one."""
    return f"{sweep}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(t))}-{secrets.token_hex(3)}"


def stamp(name: str) -> str:
    """The YYYYmmdd-HHMMSS of an experiment folder's name ("" if it has none)."""
    m = STAMP.search(name)
    return m.group(1) if m else ""


def experiments(root: Folder, sweep: str) -> list[Folder]:
    """The experiment folders of `sweep` under root (those holding sweep.json), oldest first (by the
    time stamp in their names)."""
    if isinstance(root, Path):
        return sorted((p.parent for p in root.glob(f"{sweep}-*/sweep.json")), key=lambda e: (stamp(e.name), e.name))
    import pyarrow.fs as pafs

    with _explained(root):
        infos = root.fs.get_file_info(pafs.FileSelector(root.path, recursive=False, allow_not_found=True))
    found = [root / n for n in sorted((i.base_name for i in infos
                                       if i.type == pafs.FileType.Directory and i.base_name.startswith(f"{sweep}-")),
                                      key=lambda n: (stamp(n), n))]
    if not found:
        return []
    states = root.fs.get_file_info([(e / "sweep.json").path for e in found])
    return [e for e, i in zip(found, states) if i.type == pafs.FileType.File]


def create_experiment(exp: Folder) -> None:
    """A new experiment folder: locally it must not exist yet, in a bucket it must hold no sweep.json
    yet (FileExistsError). sweeper.run writes sweep.json into it once Tune has written its state."""
    if isinstance(exp, Path):
        exp.mkdir(parents=True)
    elif is_file(exp / "sweep.json"):
        raise FileExistsError(f"{exp} already holds an experiment")


def local_folder(exp: Folder) -> Path:
    """Where this machine keeps files of `exp` that must be local (hpo's SQLite study, the report's
    inputs): the folder itself if local, else its cache folder."""
    return exp if isinstance(exp, Path) else remote.cache_folder(str(exp), "experiments")


def local_file(exp: Folder, name: str) -> Path:
    folder = local_folder(exp)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


# ---------------------------------------------------------------- Ray Tune

def ray_storage(exp: Folder) -> dict:
    """tune.RunConfig's name, storage_path (and storage_filesystem: then the path is scheme-less)."""
    if isinstance(exp, Path):
        return {"name": exp.name, "storage_path": str(exp.parent)}
    return {"name": exp.name, "storage_path": exp.parent.path, "storage_filesystem": exp.fs}


def upload_study(exp: Folder) -> bool:
    """Copy hpo's SQLite study (local_file(exp, OPTUNA_DB)) to exp/optuna.db in the bucket, as one
    consistent snapshot (SQLite's online backup, so a write Optuna makes meanwhile is either in it or
    not). False when exp is local (the study is already there) or there is no study yet."""
    import sqlite3
    import tempfile

    src = local_folder(exp) / OPTUNA_DB
    if isinstance(exp, Path) or not src.is_file():
        return False
    with tempfile.TemporaryDirectory() as tmp:
        snap = Path(tmp) / OPTUNA_DB
        with contextlib.closing(sqlite3.connect(src)) as a, contextlib.closing(sqlite3.connect(snap)) as b:
            a.backup(b)
        write_bytes(exp / OPTUNA_DB, snap.read_bytes())
    return True


def study_upload_callback(exp: Folder):
    """A Tune callback that uploads the hpo study to a remote experiment after every finished or
    stopped trial, so that a driver lost with its machine resumes elsewhere from the bucket with at
    most one trial's worth of study missing (Tune then re-asks Optuna for that trial)."""
    from ray import tune

    class StudyUpload(tune.Callback):
        def on_trial_complete(self, iteration, trials, trial, **info):
            upload_study(exp)

        def on_experiment_end(self, trials, **info):
            upload_study(exp)

    return StudyUpload()


_stored = {"error": None}  # StoredStateCheck's finding at the end of fit(): None, or the one-line error


def stored_state_error() -> str | None:
    """Why the end of the last fit() left the bucket without Tune's final state (one line), else None."""
    return _stored["error"]


def same_content(fs, path: str, data: bytes) -> bool:
    """Whether the object fs:path holds `data` (its size known to match), by its S3 ETag where that is
    the content's MD5 (one PutObject), or the MD5 of that MD5 (one multipart part, "-1", as pyarrow
    uploads); otherwise (more parts, another store) by reading it back."""
    with fs.open_input_stream(path) as s:
        etag = (s.metadata() or {}).get("ETag", b"").decode().strip('"')
        md5 = hashlib.md5(data, usedforsecurity=False)
        if re.fullmatch(r"[0-9a-f]{32}", etag):
            return etag == md5.hexdigest()
        if re.fullmatch(r"[0-9a-f]{32}-1", etag):
            return etag[:32] == hashlib.md5(md5.digest(), usedforsecurity=False).hexdigest()
        return s.read() == data


def upload_missing(local: Path, fs, remote: str) -> int:
    """Upload every file under local that remote (a folder of fs) lacks or holds with other content
    (another size, or the same size and another checksum); returns how many. OSError when the file
    system cannot be reached."""
    import pyarrow.fs as pafs

    have = {i.path[len(remote) + 1:]: i.size
            for i in fs.get_file_info(pafs.FileSelector(remote, recursive=True, allow_not_found=True))
            if i.type == pafs.FileType.File}
    sent = 0
    for p in sorted(local.rglob("*")):
        rel = p.relative_to(local).as_posix()
        if not p.is_file():
            continue
        data = p.read_bytes()
        if have.get(rel) != len(data) or not same_content(fs, f"{remote}/{rel}", data):
            with fs.open_output_stream(f"{remote}/{rel}") as out:
                out.write(data)
            sent += 1
    return sent


def stored_state_check():
    """A Tune callback for an experiment in a bucket. Tune uploads what the driver wrote (its experiment
    state, each trial's params.json, result.json, progress.csv) from a local staging folder, and when
    an upload fails it logs the error and goes on, at the end of fit() too. At the end this callback
    compares the bucket with that folder and uploads what is missing or stale; if the bucket cannot
    be reached, stored_state_error() says so, and sweeper.run ends with exit status 4 and the
    `--resume` command instead of a report that the bucket does not hold."""
    from ray import tune

    class StoredStateCheck(tune.Callback):
        def setup(self, **info):
            _stored["error"] = None

        def on_experiment_end(self, trials, **info):
            if not trials:
                return
            storage = trials[0].storage  # the experiment's StorageContext (the same for every trial)
            try:
                upload_missing(Path(storage.experiment_driver_staging_path), storage.storage_filesystem,
                               storage.experiment_fs_path)
            except OSError as e:
                _stored["error"] = one_line(e)

    return StoredStateCheck()


def prepare_restore(exp: Folder) -> dict:
    """tune.Tuner.restore's path (and storage_filesystem); first copies a stored hpo study (optuna.db)
    back to the local path its searcher state names, unless this machine still has it (then its copy
    is the newer one: the bucket's is uploaded after every finished trial and when a run ends)."""
    if isinstance(exp, Path):
        return {"path": str(exp)}
    if not (local_folder(exp) / OPTUNA_DB).is_file():
        pull_file(exp / OPTUNA_DB, local_folder(exp) / OPTUNA_DB)
    return {"path": exp.path, "storage_filesystem": exp.fs}


# ---------------------------------------------------------------- the report of a remote experiment

def pull_file(src: Location, dest: Path, info=None) -> bool:
    """Copy src to dest unless dest has src's size and modification time; False if src is not a file."""
    import pyarrow.fs as pafs

    info = info or src.fs.get_file_info(src.path)
    if info.type != pafs.FileType.File:
        return False
    mtime = info.mtime.timestamp() if info.mtime is not None else None
    if dest.is_file() and dest.stat().st_size == info.size and mtime is not None \
            and abs(dest.stat().st_mtime - mtime) < 1e-3:
        return True
    remote.download(src.fs, src.path, dest, info.size)
    if mtime is not None:
        os.utime(dest, (mtime, mtime))
    return True


def inside(dest: Path, rel: str, exp: Location) -> Path:
    """dest/rel, refused (StorageError) when the object key `rel` of exp would land outside dest: an
    absolute path, a ".." part, or a backslash (a bucket's keys are any strings)."""
    parts = rel.split("/")
    if rel.startswith("/") or "\\" in rel or any(p in ("", ".", "..") for p in parts):
        raise StorageError(f"{exp} holds the object {rel!r}, a key that is not a plain relative path and would be "
                           f"copied outside the cache folder {dest}; delete that object from the bucket")
    return dest / rel


def pull(exp: Location, dest: Path) -> int:
    """Copy the report's inputs of `exp` into dest (unchanged files are kept); returns how many files
    `exp` holds in all (0: it does not exist). A checkpoint's file that Tune deleted between the listing
    and its copy (a running trial's older checkpoint) is left out."""
    import pyarrow.fs as pafs

    infos = [i for i in exp.fs.get_file_info(pafs.FileSelector(exp.path, recursive=True, allow_not_found=True))
             if i.type == pafs.FileType.File]
    rel = {i.path[len(exp.path) + 1:]: i for i in infos}
    for r in rel:
        inside(dest, r, exp)
    for r, info in rel.items():
        name = r.rsplit("/", 1)[-1]
        if name in REPORT_INPUTS or (EXPERIMENT_STATE.fullmatch(name) and "/" not in r):
            try:
                pull_file(exp / r, dest / r, info)
            except FileNotFoundError:
                if "/checkpoint_" not in r:
                    raise
    return len(rel)


def push(files, cache: Path, exp: Location) -> None:
    """Upload local files of the cache folder to the same relative paths under exp."""
    for p in sorted({Path(f) for f in files}):
        write_bytes(exp / p.relative_to(cache).as_posix(), p.read_bytes())


def report_inputs(exp: str | Folder) -> tuple[Folder, Path]:
    """(exp resolved, a local folder holding its report's inputs): a local folder (or file:// URI) is
    itself; a bucket's files are pulled into the local cache first. StorageError if it holds nothing
    or cannot be read."""
    if isinstance(exp, (str, Path)) and not is_uri(exp):
        return Path(exp), Path(exp)
    try:
        exp = resolve(exp) if isinstance(exp, str) else exp
        if isinstance(exp, Path):  # a file:// URI
            return exp, exp
        cache = local_folder(exp)
        if not pull(exp, cache):
            raise StorageError(f"{exp} does not exist (no files there); pass the experiment folder printed "
                               f"by sweeper.run, such as {exp.parent}/<sweep>-<stamp>")
    except OSError as e:
        raise StorageError(explain(e, str(exp))) from None
    return exp, cache
