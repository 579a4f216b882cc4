"""One driver per experiment: the lease a driver holds on its experiment folder while it runs.

A second `sweeper.run` on an experiment another live driver holds (`--resume` of it, or a new run
that lands in it) is refused in one line naming the holder (host, PID, since when); a holder that
died without releasing (kill -9, a lost machine) is detected, so `--resume` then needs no manual step.

- Local folder: `driver.lock`, locked with a POSIX record lock (`fcntl.lockf`) for as long as the driver
  lives; the kernel drops the lock when the process ends in any way, so a killed holder is never
  waited for. The file's text names the holder for the refusal line. POSIX locks hold between the
  processes of one machine and, on NFSv4, between machines; a file system without locking gives
  no guarantee.
- S3: the object `driver.lease` (JSON: host, PID, since, token), created only if absent (PutObject
  with `If-None-Match: *`), renewed every `lease_s() / 4` seconds by a PutObject conditional on the
  ETag the driver last wrote (`If-Match`), deleted on release under the same condition. Another
  driver takes it over only when the holder is dead: its heartbeat (the object's LastModified,
  against the bucket's own clock, so no clock of two machines is compared) is older than
  `lease_s()` ($VBI_MUR_LEASE_S, default 60), or it runs on this machine and its process is gone;
  the takeover is conditional on the stale ETag, so of two drivers taking over one wins. Where it
  stops: a holder paused for longer than `lease_s()` (a suspended machine, a network partition)
  loses the lease to a new driver and finds out at its next renewal (it says so on stderr, and
  its writes may by then have mixed with the new driver's); a driver on another machine whose
  clock or host name is the same as this one's is told apart by its PID and start time only.
- Other URI schemes (gs://, ...): pyarrow's file systems offer no conditional write, so no lease is
  taken; sweeper.run says so on stderr and one driver per experiment is up to the user.

    python -m sweeper.run ablation_radius --resume    # exit 2 while another driver holds it
"""
from __future__ import annotations

import fcntl
import json
import os
import secrets
import socket
import sys
import threading
import time
from pathlib import Path

from sweeper import storage as store
from sweeper.driver.preflight import InputError

LOCK_FILE = "driver.lock"   # a local experiment's lock (its text: the holder)
LEASE_OBJECT = "driver.lease"  # a bucket's lease object


class LeaseHeld(InputError):
    """Another live driver holds the experiment; the message names it and what to do."""


def lease_s() -> float:
    """Seconds without a heartbeat after which a bucket's lease counts as its holder's dead one."""
    raw = os.environ.get("VBI_MUR_LEASE_S", "60")
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value >= 1 or value == float("inf"):
        raise InputError(f"VBI_MUR_LEASE_S={raw!r} is not a number of seconds >= 1; unset it (60) or set e.g. 60")
    return value


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), None if it does not run (a zombie,
    killed and not yet reaped by its parent, does not)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return None if fields[0] in ("Z", "X") else int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def holder_record() -> dict:
    """What a lease says of this driver."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "start": start_time(os.getpid()),
            "since": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "token": secrets.token_hex(8)}


def dead_here(holder: dict) -> bool:
    """Whether the holder ran on this machine and its process is gone (or its PID is another's now)."""
    if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return False
    if Path("/proc/self/stat").is_file():  # Linux: the PID's start time tells a reused PID and a zombie apart
        now = start_time(holder["pid"])
        return now is None or now != holder.get("start")
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's live process
        pass
    return False


def held_message(exp, holder: dict, resume: str, extra: str = "") -> str:
    who = (f"the driver on {holder.get('host', '?')} (PID {holder.get('pid', '?')}) since {holder.get('since', '?')}"
           if holder else "another driver (it is writing its details now)")
    return (f"{exp} is held by {who}{extra}, which is still running it; wait until it ends (or stop it: Ctrl+C, "
            f"or kill {holder.get('pid', 'PID')} on {holder.get('host', 'its host')}), then run `{resume}`")


class DriverLease:
    """The lease on experiment folder `exp`: acquire() (LeaseHeld if another live driver holds it),
    release(). `resume` is the command line the refusal suggests. InputError for a bad VBI_MUR_LEASE_S."""

    def __init__(self, exp, resume: str):
        self.exp, self.resume = exp, resume
        self.stale_s = lease_s()
        self.record = holder_record()
        self._fd = None                # local: the locked file's descriptor
        self._etag = None              # S3: the ETag this driver last wrote
        self._stop = threading.Event()
        self._beat = None

    def acquire(self) -> None:
        if isinstance(self.exp, Path):
            self._acquire_local()
        elif self.exp.scheme == "s3":
            import botocore.exceptions

            try:
                self._acquire_s3()
            except botocore.exceptions.BotoCoreError as e:  # no answer, no credentials: one line, not a traceback
                raise InputError(store.explain(e, str(self.exp / LEASE_OBJECT))) from None
        else:
            print(f"note: {self.exp.scheme}:// offers no conditional write here, so this driver takes no lease on "
                  f"{self.exp}; run one driver at a time on it", file=sys.stderr)

    def release(self) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=30)
        if self._fd is not None:
            os.close(self._fd)  # drops the lock (the file stays: its text names the last holder)
            self._fd = None
        if self._etag is not None:
            import botocore.exceptions

            try:
                self._client().delete_object(Bucket=self.exp.bucket, Key=self._key(), IfMatch=self._etag)
            except botocore.exceptions.ClientError as e:  # taken over while this driver was paused
                print(f"warning: the lease {self.exp / LEASE_OBJECT} was not this driver's any more "
                      f"({e.response['Error']['Code']}); left as it is", file=sys.stderr)
            except botocore.exceptions.BotoCoreError as e:  # the bucket is down: the exit status says why
                print(f"warning: the lease {self.exp / LEASE_OBJECT} could not be released ({e}); a later "
                      f"driver takes it over once its heartbeat is older than the lease", file=sys.stderr)
            self._etag = None

    # ---------------------------------------------------------------- local: a POSIX lock

    def _acquire_local(self) -> None:
        path = self.exp / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise InputError(f"cannot lock {path} ({e.strerror}); resume a folder this user may write") from None
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise LeaseHeld(held_message(self.exp, self._read_local(path), self.resume)) from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(self.record).encode())
        os.fsync(fd)
        self._fd = fd

    @staticmethod
    def _read_local(path: Path) -> dict:
        for _ in range(20):  # the holder writes its record just after it locked the file
            try:
                holder = json.loads(path.read_text())
                if isinstance(holder, dict):
                    return holder
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        return {}

    # ---------------------------------------------------------------- S3: a conditional object

    def _key(self) -> str:
        return (self.exp / LEASE_OBJECT).path.split("/", 1)[1]

    def _client(self):
        import boto3

        return boto3.client("s3")

    def _acquire_s3(self) -> None:
        import botocore.exceptions

        stale_s, client, body = self.stale_s, self._client(), json.dumps(self.record).encode()
        for _ in range(3):
            try:
                self._etag = client.put_object(Bucket=self.exp.bucket, Key=self._key(), Body=body,
                                               IfNoneMatch="*")["ETag"]
                break
            except botocore.exceptions.ClientError as e:
                if e.response["Error"]["Code"] not in ("PreconditionFailed", "ConditionalRequestConflict"):
                    raise InputError(store.explain(e, str(self.exp / LEASE_OBJECT))) from None
            try:
                got = client.get_object(Bucket=self.exp.bucket, Key=self._key())
            except client.exceptions.NoSuchKey:  # released meanwhile: try again
                continue
            try:
                holder = json.loads(got["Body"].read() or b"{}")
            except ValueError:  # a lease object this code did not write: no holder to name
                holder = {}
            holder = holder if isinstance(holder, dict) else {}
            server_now = got["ResponseMetadata"]["HTTPHeaders"].get("date")
            age = _age_s(got["LastModified"], server_now)
            if not (dead_here(holder) or age > stale_s):
                raise LeaseHeld(held_message(self.exp, holder, self.resume,
                                             f", heartbeat {age:.0f} s ago (dead after {stale_s:.0f} s)"))
            try:  # the holder is dead: take its lease over, unless another driver did first
                self._etag = client.put_object(Bucket=self.exp.bucket, Key=self._key(), Body=body,
                                               IfMatch=got["ETag"])["ETag"]
                print(f"note: took over the lease of {self.exp} from the driver on {holder.get('host')} "
                      f"(PID {holder.get('pid')}), which died without releasing it", file=sys.stderr)
                break
            except botocore.exceptions.ClientError as e:
                if e.response["Error"]["Code"] not in ("PreconditionFailed", "ConditionalRequestConflict"):
                    raise InputError(store.explain(e, str(self.exp / LEASE_OBJECT))) from None
        else:
            raise LeaseHeld(held_message(self.exp, {}, self.resume))
        self._beat = threading.Thread(target=self._heartbeat, args=(client, body, stale_s / 4), daemon=True,
                                      name="driver-lease")
        self._beat.start()

    def _heartbeat(self, client, body: bytes, every_s: float) -> None:
        import botocore.exceptions

        while not self._stop.wait(every_s):
            try:
                self._etag = client.put_object(Bucket=self.exp.bucket, Key=self._key(), Body=body,
                                               IfMatch=self._etag)["ETag"]
            except botocore.exceptions.ClientError as e:
                if e.response["Error"]["Code"] == "PreconditionFailed":
                    print(f"warning: another driver took over {self.exp} (this one missed its heartbeats for "
                          f"over {self.stale_s:.0f} s); stop this driver", file=sys.stderr)
                    self._etag = None
                    return
                print(f"warning: the lease of {self.exp} was not renewed ({e.response['Error']['Code']}); "
                      f"trying again in {every_s:.0f} s", file=sys.stderr)
            except Exception as e:  # the bucket not answering: the next beat tries again
                print(f"warning: the lease of {self.exp} was not renewed ({type(e).__name__}); trying again in "
                      f"{every_s:.0f} s", file=sys.stderr)


def _age_s(last_modified, server_date: str | None) -> float:
    """Seconds from an object's LastModified to the server's Date header (its own clock), else to ours."""
    from email.utils import parsedate_to_datetime

    now = parsedate_to_datetime(server_date).timestamp() if server_date else time.time()
    return now - last_modified.timestamp()
