"""Where the whole test suite's CPU goes: every process it starts, by kind, sampled from /proc.

    python benchmarks/suite_cpu.py               # the README's whole-suite command, inductor's cache cold
    python benchmarks/suite_cpu.py --warm        # keep inductor's kernel cache (the compile tests then build little)

Hypothesis: on a 2-core machine the suite is CPU-bound (a third pytest process does not shorten it), so its
time follows the CPU its processes use, not its waits; and that CPU goes mostly to what every sweep pays per
process (a trial process's imports, a local Ray's servers) rather than to training. A cut is then worth
what it saves of the kinds below, and a wait shortened saves little.

While the suite runs, every 0.5 s each process's CPU seconds (user + system, /proc/PID/stat) are read and
its last value kept, with its command line as first seen; the machine's own CPU total comes from
/proc/stat. Kinds, by command line: pytest (the test processes: the fast tests, the compile tests,
in-process reference runs, the slow tests' polling), trial (Ray's worker processes: the trainable's
imports and its training; prestarted ones that never ran a trial included), ray server (GCS, raylet,
dashboard and its agent and module processes, log and autoscaler monitors, client server, `ray start`),
driver (`python -m sweeper.run`), ray cli (`ray job`, `ray status`), mlflow, chromium, compiler, other; and
within each kind, by program (a Python script's or module's name, else the executable's). What the
sampling misses (a process shorter than a look, such as a C++ compiler of inductor's kernels, and the
kernel's own threads) is the machine's total less the sum of the kinds ("unattributed").
pytest runs with --durations=0: its test time by file and its slowest tests are kept beside the CPU, so
that a cut can be set against both. Writes benchmarks/results/suite_cpu.json; a failing suite writes
nothing (its failed tests are printed).
"""
from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.provenance import cpu_name  # noqa: E402
from benchmarks.test_times import WHOLE, summary_of  # noqa: E402  the README's whole-suite command

OUT = ROOT / "benchmarks" / "results" / "suite_cpu.json"
TCK = os.sysconf("SC_CLK_TCK")
KINDS = [  # (kind, pattern on the command line), first match wins
    ("driver", r"-m sweeper\.run"),  # before pytest: a driver's --storage is often under pytest's tmp folder
    ("pytest", r"-m pytest\b|exec\(eval\(sys\.stdin"),  # the main process and xdist's workers
    ("ray cli", r"/ray (job|status)\b"),
    ("ray server", r"/raylet/raylet "),  # its command line names default_worker.py, the workers it starts
    # a trial process starts as setup_worker.py (its runtime env), which execs default_worker.py; both name the
    # raylet's socket on their command line, so they come before the servers
    ("trial", r"setup_worker\.py|default_worker\.py|^ray::(?!DashboardAgent|RuntimeEnvAgent|JobSupervisor)"),
    ("ray server", r"gcs_server|raylet|dashboard|log_monitor|autoscaler/_private/monitor|ray\.util\.client\.server|"
                   r"runtime_env|multiprocessing\.forkserver|ray start|^ray::"),
    ("mlflow", r"mlflow|gunicorn|uvicorn|huey"),
    ("chromium", r"chrom"),
    ("compiler", r"cc1plus|\bg\+\+|\bgcc\b|\bcollect2\b|\bld\b"),
]


def program(cmd: str) -> str:
    """A command line's program: its first Python script's or module's name, else its executable's."""
    words = cmd.split()
    if not words:
        return "?"
    exe = Path(words[0]).name
    if not exe.startswith("python"):
        return exe
    for i, w in enumerate(words[1:], 1):
        if w == "-m" and i + 1 < len(words):
            return words[i + 1]
        if w == "-c":
            return f"{exe} -c"
        if not w.startswith("-"):  # the script: a .py file or an installed command such as `ray`
            return Path(w).name
    return exe


DURATION = re.compile(r"^(?P<s>[0-9.]+)s (?P<phase>setup|call|teardown) +(?P<test>\S+)$", re.M)


def durations(text: str) -> list[tuple[float, str, str]]:
    """(seconds, phase, test id) of each line of pytest's --durations report."""
    return [(float(m["s"]), m["phase"], m["test"]) for m in DURATION.finditer(text)]


def kind(cmd: str) -> str:
    return next((k for k, pat in KINDS if re.search(pat, cmd)), "other")


def machine_cpu_s() -> float:
    """User + nice + system + irq + softirq seconds of all CPUs since boot (/proc/stat)."""
    f = open("/proc/stat").readline().split()[1:]
    return sum(int(f[i]) for i in (0, 1, 2, 5, 6)) / TCK


def read_stat(pid: str) -> tuple[tuple[int, str], float] | None:
    """((PID, start time), CPU seconds) of a process, None if it ended before it could be read."""
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(pid), f[19]), (int(f[11]) + int(f[12])) / TCK  # a reused PID has another start time
    except (OSError, IndexError, ValueError):
        return None


def processes() -> dict[tuple[int, str], float]:
    me = os.getpid()
    return dict(st for d in os.listdir("/proc") if d.isdigit() and int(d) != me and (st := read_stat(d)))


def sample(seen: dict, stop: threading.Event) -> None:
    while not stop.is_set():
        for key, cpu in processes().items():
            if key not in seen:
                try:
                    cmd = open(f"/proc/{key[0]}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue  # ended between the two reads
                seen[key] = [cpu, cmd, cpu]  # [last CPU, command line, CPU when first seen]
            seen[key][0] = cpu
        stop.wait(0.5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warm", action="store_true", help="keep inductor's kernel cache")
    args = ap.parse_args()
    if not args.warm:
        shutil.rmtree(f"/tmp/torchinductor_{getpass.getuser()}", ignore_errors=True)  # inductor's default cache
    before = set(processes())
    seen: dict = {}
    stop = threading.Event()
    sampler = threading.Thread(target=sample, args=(seen, stop), daemon=True)
    load_before, cpu0, t0 = os.getloadavg()[0], machine_cpu_s(), time.monotonic()
    sampler.start()
    p = subprocess.run([sys.executable, *WHOLE.split()[1:], "--durations=0"], cwd=ROOT, capture_output=True, text=True)
    wall, cpu_total = time.monotonic() - t0, machine_cpu_s() - cpu0
    stop.set()
    sampler.join()
    failed = re.findall(r"^FAILED (\S+)", p.stdout, re.M)
    if p.returncode != 0:  # as benchmarks/test_times.py: a failing suite's figures are not recorded
        sys.exit(f"the suite failed (exit {p.returncode}; {failed or 'see its output'}); nothing written:\n"
                 f"{p.stdout[-3000:]}")
    counts, pytest_s = summary_of(p.stdout)
    programs: dict[tuple[str, str], list] = {}  # (kind, program) -> [CPU s, processes]
    top = []
    for key, (cpu, cmd, first) in seen.items():
        used = cpu - first if key in before else cpu  # a process older than the run: only what it used during it
        if used > 0:
            k = kind(cmd)
            prog = programs.setdefault((k, program(cmd)), [0.0, 0])
            prog[0], prog[1] = prog[0] + used, prog[1] + 1
            top.append((used, k, cmd[:160]))
    by_kind: dict[str, dict] = {}
    for (k, _), (c, n) in programs.items():
        row = by_kind.setdefault(k, {"cpu_s": 0.0, "processes": 0})
        row["cpu_s"], row["processes"] = row["cpu_s"] + c, row["processes"] + n
    tests = durations(p.stdout)
    by_file: dict[str, float] = {}
    for t, _, name in tests:
        f = name.split("::")[0]
        by_file[f] = by_file.get(f, 0.0) + t
    attributed = sum(r["cpu_s"] for r in by_kind.values())
    out = {
        "benchmark": "suite_cpu",
        "machine": f"{cpu_name()}, {os.cpu_count()} cores",
        "date": date.today().isoformat(),
        "command": WHOLE,
        "inductor_cache": "warm" if args.warm else "cold",
        "pytest_counts": counts,
        "pytest_s": pytest_s,
        "wall_s": round(wall, 1),
        "load_1min_before": round(load_before, 2),
        "machine_cpu_s": round(cpu_total, 1),
        "cpu_busy_share": round(cpu_total / (wall * os.cpu_count()), 3),
        "kinds": {k: {"cpu_s": round(r["cpu_s"], 1), "processes": r["processes"],
                      "share": round(r["cpu_s"] / cpu_total, 3)}
                  for k, r in sorted(by_kind.items(), key=lambda kv: -kv[1]["cpu_s"])},
        "unattributed_cpu_s": round(cpu_total - attributed, 1),
        "programs": [{"kind": k, "program": prog, "cpu_s": round(c, 1), "processes": n}
                     for (k, prog), (c, n) in sorted(programs.items(), key=lambda kv: -kv[1][0])[:40]],
        "test_s_by_file": {f: round(t, 1) for f, t in sorted(by_file.items(), key=lambda kv: -kv[1])},
        "slowest_tests": [{"s": t, "phase": ph, "test": name} for t, ph, name in sorted(tests, reverse=True)[:25]],
        "top_processes": [{"cpu_s": round(c, 1), "kind": k, "command": cmd} for c, k, cmd in sorted(top, reverse=True)[:15]],
    }
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k not in ("top_processes", "programs")}, indent=1))
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
