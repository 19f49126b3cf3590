"""The HTTP benchmark: wrk against hongbao and against the Python ceiling, ratios in one run.

For each worker count (default 1 and 2), in a fresh temporary data directory:

1. start the ceiling (``ceiling.py``: a minimal uvloop ``asyncio.Protocol`` server with a fixed 200
   answer, as many processes as hongbao has workers) and ``hongbao serve --workers N`` (embedded
   backend, default settings, no pinning);
2. prepare the money: top up a sender, one group of 500 (the sender and 499 users, one token each,
   minted with the server's key file), a paid packet to grab, and paid 100-share packets to open;
3. for each target, a warm-up wrk run (discarded), then the measured one with the same settings
   (``wrk -t1 -c64 -d10s`` by default), in this order:

   - ``ceiling``: ``GET /`` on the ceiling server (measured before /healthz and again after grab;
     the ratios use the mean of the two, since the machine's load drifts);
   - ``healthz``: ``GET /healthz``;
   - ``grab``: ``POST /v1/packets/{id}/grab`` by a member who has not opened (200 ``{"status":"ok"}``);
   - ``open``: ``POST /v1/packets/{id}/open`` on a hot 100-share packet refilled in a loop: the Lua
     script walks (packet, user) pairs, 100 distinct members per packet, so every open is a new
     receipt and the next packet is opened as soon as one is finished. Enough packets for the
     measured run are created after the warm-up from the warm-up's open rate; were they used up
     anyway, the script stops early and the rate stays right (opens over the actual duration).

Other backends (the grab benchmark, ``make bench-grab``: bench/http/grab.py starts
MariaDB and Redis and runs this with the production backend): ``--server-config FILE`` adds TOML to
hongbao's configuration; ``--grab-opened`` has another member open the grab packet first, so no
grab is answered from a worker's memory alone (each reads the shared grab state: Redis in
production); ``--redis-url URL`` adds the target ``redis_rt``: the ceiling server answering each
request after one redis-py round trip of its own (``ceiling.py --redis-url``), reported with the
ratio ``grab/redis_rt``; ``--targets`` picks targets, ``--floor grab=0.4`` sets a floor.

Each run also records the servers' CPU time (``server_cpu_us_per_request``, and ``server_cores_busy``:
below the worker count, other processes took CPU from the server, so the machine was not quiet)
and the load average is kept with the result. ``--profile DIR`` records py-spy profiles of the
hongbao workers during each measured run.

Every run must be correct: no socket error, every answer 2xx (the open run: every answer 200 and
the receipts in the database equal the 200s counted by wrk). Then the ratios to the ceiling of the
same worker count are checked against the floors: /healthz >= 70 %, grab >= 50 % (``--no-gate``
reports them without failing). The result goes to ``bench-results/http.json`` and a table is printed.

Usage (from the checkout): ``python bench/http/run.py [--duration 10] [--workers 1,2] [--no-gate]``,
or ``python -m hongbao.bench.http.run``. Needs ``wrk`` (Debian's package, with LuaJIT scripting).
Exit status: 0 pass, 1 a floor missed or a run incorrect, 2 cannot run (no wrk, bad flags).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from hongbao.bench.services.process import BenchError, Process, clean_env, free_port, start_hongbao
from hongbao.core.messages import GROUP_STREAM
from hongbao.server.auth import embedded_secret, mint
from hongbao.server.composition import embedded_files

FLOORS = {"healthz": 0.70, "grab": 0.50}
TARGETS = ("ceiling", "healthz", "grab", "open", "redis_rt")
GROUP_USERS = 499  # with the sender: the default maximum group size of 500
SHARES = 100
PACKET_FEN = 10_000
CEILING = Path(__file__).with_name("ceiling.py")
MAX_OPEN_PACKETS = 5_000
SETTLE_S = 1.0
PUSH_DRAIN_TIMEOUT_S = 300.0

# done() of every script: one JSON line with wrk's counters and latency percentiles (microseconds),
# plus the per-status counts of scripts that keep them in a global table ``statuses``.
_DONE_LUA = r"""
local threads = {}

function setup(thread)
   table.insert(threads, thread)
end

function done(summary, latency, requests)
   local statuses, parts, extra = {}, {}, {}
   for _, t in ipairs(threads) do
      local s = t:get("statuses")
      if s then
         for code, n in pairs(s) do statuses[code] = (statuses[code] or 0) + n end
      end
      local next_pair = t:get("next_pair")
      if next_pair then table.insert(extra, string.format('"next_pair":%d', next_pair)) end
      local sent = t:get("sent_opens")
      if sent then table.insert(extra, string.format('"sent_opens":%d', sent)) end
      local exhausted = t:get("exhausted")
      if exhausted then table.insert(extra, string.format('"exhausted":%d', exhausted)) end
   end
   for code, n in pairs(statuses) do table.insert(parts, string.format('"%d":%d', code, n)) end
   local e = summary.errors
   io.write(string.format(
      'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
      '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
      '"latency_us":{"mean":%.1f,"stdev":%.1f,"max":%d,"p50":%d,"p75":%d,"p90":%d,"p99":%d,"p99_9":%d},' ..
      '"statuses":{%s}%s}\n',
      summary.requests, summary.duration, summary.bytes,
      e.connect, e.read, e.write, e.status, e.timeout,
      latency.mean, latency.stdev, latency.max, latency:percentile(50), latency:percentile(75),
      latency:percentile(90), latency:percentile(99), latency:percentile(99.9),
      table.concat(parts, ","), (#extra > 0) and ("," .. table.concat(extra, ",")) or ""))
end
"""

# A fixed request (wrk formats it once): no request() or response() callback to slow wrk down.
_STATIC_LUA = r"""
wrk.method = os.getenv("BENCH_METHOD") or "GET"
local auth = os.getenv("BENCH_AUTHORIZATION")
if auth and auth ~= "" then wrk.headers["Authorization"] = auth end
"""

# args: packets_file tokens_file first_pair shares. Pair k opens packet k // shares as user
# (packet * shares + k % shares) % #tokens: 100 distinct members per packet, each open a new receipt.
_OPEN_LUA = r"""
local packets, tokens, shares, pair, last_path, last_auth
statuses, sent_opens, exhausted, next_pair = {}, 0, 0, 0

local function lines(path)
   local out = {}
   for line in io.lines(path) do
      if line ~= "" then table.insert(out, line) end
   end
   return out
end

function init(args)
   packets, tokens = lines(args[1]), lines(args[2])
   pair, shares = tonumber(args[3]), tonumber(args[4])
   next_pair = pair
   -- once every packet is used up: a new user on the last (finished) packet, answered 410
   local last = #packets - 1
   last_path = "/v1/packets/" .. packets[last + 1] .. "/open"
   last_auth = "Bearer " .. tokens[((last + 1) * shares) % #tokens + 1]
end

function request()
   local packet = math.floor(pair / shares)
   if packet >= #packets then
      if exhausted == 0 then wrk.thread:stop() end
      exhausted = exhausted + 1
      return wrk.format("POST", last_path, {["Authorization"] = last_auth})
   end
   local user = (packet * shares + pair % shares) % #tokens
   pair = pair + 1
   next_pair = pair
   sent_opens = sent_opens + 1
   return wrk.format("POST", "/v1/packets/" .. packets[packet + 1] .. "/open",
                     {["Authorization"] = "Bearer " .. tokens[user + 1]})
end

function response(status, headers, body)
   statuses[status] = (statuses[status] or 0) + 1
end
"""


@dataclass(frozen=True)
class Options:
    """What to run: wrk settings, worker counts, where to write, whether floors fail the run."""

    duration_s: float = 10.0
    warmup_s: float = 2.0
    connections: int = 64
    threads: int = 1
    workers: tuple[int, ...] = (1, 2)
    out: Path = Path("bench-results/http.json")
    gate: bool = True
    timeout_s: float = 10.0
    keep_dir: bool = False
    profile_dir: Path | None = None
    profile_format: str = "flamegraph"
    server_config: str = ""  # TOML lines added to hongbao's configuration (e.g. the production backend)
    grab_opened: bool = False  # another member opens the grab packet first: grabs read the shared state
    redis_url: str = ""  # the redis_rt target's Redis
    targets: tuple[str, ...] = ("ceiling", "healthz", "grab", "open")
    floors: dict[str, float] = field(default_factory=lambda: dict(FLOORS))


@dataclass
class Run:
    """One measured wrk run against one target."""

    target: str
    workers: int
    wrk: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        """The measured run's length in seconds, as wrk timed it."""
        return float(self.wrk["duration_us"]) / 1e6

    @property
    def rps(self) -> float:
        """Answers per second (for open: new receipts, 200s only, per second)."""
        if self.target == "open":
            return int(self.wrk["statuses"].get("200", 0)) / self.seconds
        return float(self.wrk["requests"]) / self.seconds

    def as_json(self) -> dict[str, Any]:
        """The run as a JSON object: rates, latency percentiles in ms, statuses, problems."""
        lat = self.wrk["latency_us"]
        return {
            "target": self.target,
            "workers": self.workers,
            "rps": round(self.rps, 1),
            "requests": self.wrk["requests"],
            "seconds": round(self.seconds, 3),
            "p50_ms": lat["p50"] / 1000,
            "p90_ms": lat["p90"] / 1000,
            "p99_ms": lat["p99"] / 1000,
            "p99_9_ms": lat["p99_9"] / 1000,
            "max_ms": lat["max"] / 1000,
            "errors": self.wrk["errors"],
            "statuses": self.wrk["statuses"],
            "problems": self.problems,
            **self.extra,
        }


def start_ceiling(workdir: Path, workers: int, redis_url: str = "") -> Process:
    """Start the uvloop ceiling server with ``workers`` processes on a free port (each answer after
    one redis-py round trip to ``redis_url`` when given); wait until ready."""
    port = free_port()
    name = "redis_rt" if redis_url else "ceiling"
    log = workdir / f"{name}-{workers}.log"
    with open(log, "wb") as stderr:
        popen = subprocess.Popen(
            [
                sys.executable,
                str(CEILING),
                "--port",
                str(port),
                "--workers",
                str(workers),
                *(["--redis-url", redis_url] if redis_url else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            cwd=workdir,
            env=clean_env(),
        )
    proc = Process(name, f"http://127.0.0.1:{port}", popen, log)
    proc.wait_ready("/")
    return proc


class Money:
    """The packets, group and tokens of one hongbao server, made through its HTTP API."""

    def __init__(self, url: str, data_dir: Path) -> None:
        self.url, self.data_dir = url, data_dir
        secret = embedded_secret(data_dir)
        self.admin = mint(secret, "admin", admin=True)
        self.sender = "bench_sender"
        self.users = [f"bench_u{i:05d}" for i in range(GROUP_USERS)]
        self.sender_token = mint(secret, self.sender)
        self.tokens = [mint(secret, user) for user in self.users]
        self._made = 0
        with self._client(self.sender_token) as client:
            self.group_id = str(_ok(client.post("/v1/groups", json={"members": self.users}), 201)["group_id"])

    def _client(self, token: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"authorization": f"Bearer {token}"}, timeout=60)

    def packets(self, n: int, parallel: int = 8) -> list[str]:
        """``n`` paid 100-share packets of the group (the sender is topped up for them first)."""
        with self._client(self.admin) as admin:
            _ok(
                admin.post(
                    f"/v1/admin/accounts/{self.sender}/topup",
                    json={"amount_fen": n * PACKET_FEN},
                    headers={"idempotency-key": f"bench-{self._made}-{n}"},
                )
            )
        self._made += n
        body = {"kind": "lucky", "count": SHARES, "total_fen": PACKET_FEN, "group_id": self.group_id}

        def make(count: int) -> list[str]:
            ids = []
            with self._client(self.sender_token) as client:
                for _ in range(count):
                    order_id = str(_ok(client.post("/v1/packets", json=body), 201)["order_id"])
                    _ok(client.post(f"/v1/packets/{order_id}/pay"))
                    ids.append(order_id)
            return ids

        chunks = [n // parallel + (1 if i < n % parallel else 0) for i in range(parallel)]
        with ThreadPoolExecutor(parallel) as pool:
            return [order_id for ids in pool.map(make, [c for c in chunks if c]) for order_id in ids]

    def push_drained(self, timeout_s: float = PUSH_DRAIN_TIMEOUT_S) -> float:
        """Wait until the group pushes queued so far (each paid packet's ``packet_received`` to
        its 499 members) are handled, so that their fan-out does not load the run that follows;
        seconds waited. Embedded backend only (its ``push.db``; no wait without it). Raises
        TimeoutError after ``timeout_s`` seconds."""
        _, path = embedded_files(self.data_dir)
        if not path.exists():
            return 0.0
        started = time.monotonic()
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            while conn.execute("SELECT COUNT(*) FROM t_queue WHERE stream = ?", (GROUP_STREAM,)).fetchone()[0]:
                if time.monotonic() - started > timeout_s:
                    raise TimeoutError(f"group pushes still queued after {timeout_s} s")
                time.sleep(0.1)
        return time.monotonic() - started

    def opened(self, order_ids: list[str]) -> tuple[int, int]:
        """(receipts, packets whose opened fen differ from their total although finished) over ``order_ids``."""
        receipts = wrong = 0
        with self._client(self.sender_token) as client:
            for order_id in order_ids:
                d = _ok(client.get(f"/v1/packets/{order_id}"))
                receipts += int(d["opened_count"])
                if d["remaining_count"] == 0 and d["opened_fen"] != d["total_fen"]:
                    wrong += 1
        return receipts, wrong


def _ok(response: httpx.Response, status: int = 200) -> Any:
    if response.status_code != status:
        raise BenchError(
            f"{response.request.method} {response.request.url.path}: {response.status_code} {response.text}"
        )
    return response.json()


def wrk(
    url: str,
    script: Path,
    opts: Options,
    seconds: float,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run wrk once; returns the JSON of the script's done()."""
    cmd = [
        "wrk",
        f"-t{opts.threads}",
        f"-c{opts.connections}",
        f"-d{max(1, round(seconds))}s",
        f"--timeout={opts.timeout_s:g}s",
        "-s",
        str(script),
        url,
    ]
    if args:
        cmd += ["--", *args]
    done = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=seconds + opts.timeout_s + 60
    )
    for line in done.stdout.splitlines():
        if line.startswith("BENCH_JSON "):
            result: dict[str, Any] = json.loads(line[len("BENCH_JSON ") :])
            return result
    raise BenchError(f"wrk failed ({done.returncode}): {' '.join(cmd)}\n{done.stdout}\n{done.stderr}")


def _cpu(seconds: float, result: dict[str, Any]) -> dict[str, float]:
    """The server's CPU during a run: in total, per request (µs), and in cores busy on average
    (below the worker count while other processes take the cores: the machine was not quiet)."""
    wall = result["duration_us"] / 1e6
    return {
        "server_cpu_s": round(seconds, 2),
        "server_cpu_us_per_request": round(seconds * 1e6 / max(result["requests"], 1), 1),
        "server_cores_busy": round(seconds / wall, 2),
    }


def _socket_problems(result: dict[str, Any]) -> list[str]:
    errors = {k: v for k, v in result["errors"].items() if v and k != "status"}
    return [f"socket errors {errors}"] if errors else []


class Bench:
    """One benchmark run over the worker counts of ``opts``."""

    def __init__(self, opts: Options, workdir: Path) -> None:
        self.opts, self.workdir = opts, workdir
        (workdir / "static.lua").write_text(_STATIC_LUA + _DONE_LUA)
        (workdir / "open.lua").write_text(_OPEN_LUA + _DONE_LUA)

    def measure(
        self,
        target: str,
        workers: int,
        url: str,
        script: str,
        env: dict[str, str] | None = None,
        server: Process | None = None,
    ) -> Run:
        """Warm up, then the measured run (profiled with py-spy when asked)."""
        path = self.workdir / script
        wrk(url, path, self.opts, self.opts.warmup_s, env=env)
        profilers = self._profile(server, f"{target}-w{workers}")
        cpu = server.cpu_seconds() if server else 0.0
        result = wrk(url, path, self.opts, self.opts.duration_s, env=env)
        cpu = server.cpu_seconds() - cpu if server else 0.0
        for profiler in profilers:
            profiler.wait(timeout=60)
        run = Run(target, workers, result, extra=_cpu(cpu, result))
        run.problems += _socket_problems(result)
        if result["errors"]["status"]:
            run.problems.append(f"{result['errors']['status']} answers were not 2xx/3xx")
        return run

    def _profile(self, server: Process | None, name: str) -> list[subprocess.Popen[bytes]]:
        if self.opts.profile_dir is None or server is None or server.name != "hongbao":
            return []
        self.opts.profile_dir.mkdir(parents=True, exist_ok=True)
        seconds = max(1, int(self.opts.duration_s) - 1)
        fmt = self.opts.profile_format
        suffix = {"flamegraph": "svg", "raw": "txt", "speedscope": "json"}[fmt]
        return [
            subprocess.Popen(
                [
                    _py_spy() or "py-spy",
                    "record",
                    "--nonblocking",
                    "-d",
                    str(seconds),
                    "-f",
                    fmt,
                    "-o",
                    str(self.opts.profile_dir / f"{name}-pid{pid}.{suffix}"),
                    "--pid",
                    str(pid),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for pid in server.children()
        ]

    def grab_run(self, workers: int, server: Process, money: Money, grab_id: str) -> Run:
        """The measured grab run (a member who has not opened), its answer checked afterwards."""
        env = {"BENCH_METHOD": "POST", "BENCH_AUTHORIZATION": f"Bearer {money.tokens[0]}"}
        grab = self.measure("grab", workers, f"{server.url}/v1/packets/{grab_id}/grab", "static.lua", env, server)
        with money._client(money.tokens[0]) as client:  # the answer wrk counted as 2xx is the one we mean
            answer = client.post(f"/v1/packets/{grab_id}/grab")
        if answer.status_code != 200 or answer.json() != {"status": "ok"}:
            grab.problems.append(f"grab answered {answer.status_code} {answer.text}")
        return grab

    def redis_rt_run(self, workers: int) -> Run:
        """The ceiling server paying one redis-py round trip per request, measured alone."""
        if not self.opts.redis_url:
            raise BenchError("the redis_rt target needs --redis-url")
        naive = start_ceiling(self.workdir, workers, self.opts.redis_url)
        try:
            return self.measure("redis_rt", workers, naive.url + "/", "static.lua", server=naive)
        finally:
            naive.stop()

    def open_run(self, workers: int, server: Process, money: Money) -> Run:
        """Warm-up and measured open runs, each on its own fresh packets; checks every receipt."""
        tokens = self.workdir / f"tokens-w{workers}.txt"
        tokens.write_text("\n".join(money.tokens) + "\n")
        url = server.url + "/"

        def one(packets: list[str], name: str, seconds: float, profile: bool) -> tuple[dict[str, Any], list[str]]:
            listing = self.workdir / f"{name}-w{workers}.txt"
            listing.write_text("\n".join(packets) + "\n")
            profilers = self._profile(server, f"open-w{workers}") if profile else []
            cpu = server.cpu_seconds()
            result = wrk(
                url, self.workdir / "open.lua", self.opts, seconds, [str(listing), str(tokens), "0", str(SHARES)]
            )
            result["server_cpu_s"] = server.cpu_seconds() - cpu
            for profiler in profilers:
                profiler.wait(timeout=60)
            used = packets[: math.ceil(result.get("next_pair", 0) / SHARES)]
            return result, used

        warm_rate_guess = 3000.0
        warm_packets = money.packets(max(2, math.ceil(self.opts.warmup_s * warm_rate_guess / SHARES)))
        warm, warm_used = one(warm_packets, "warm", self.opts.warmup_s, False)
        warm_rate = warm["statuses"].get("200", 0) / max(warm["duration_us"] / 1e6, 1e-3)
        # a 1 s warm-up can underestimate the steady rate (a CI run made 32 packets and measured 3107 opens/s)
        needed = min(
            MAX_OPEN_PACKETS, math.ceil(max(warm_rate, warm_rate_guess) * self.opts.duration_s * 3 / SHARES) + 2
        )
        started = time.monotonic()
        packets = money.packets(needed)
        made_s = time.monotonic() - started
        drain_s = money.push_drained()
        result, used = one(packets, "open", self.opts.duration_s, True)
        run = Run(
            "open",
            workers,
            result,
            extra={
                **_cpu(result["server_cpu_s"], result),
                "sent_opens": result.get("sent_opens", 0),
                "packets_made": needed,
                "packets_used": len(used),
                "packet_setup_s": round(made_s, 2),
                "push_drain_s": round(drain_s, 2),
            },
        )
        run.problems += _socket_problems(result)
        time.sleep(SETTLE_S)  # the opens in flight when wrk stopped finish on the server
        for name, res, listed in (("warm-up", warm, warm_used), ("measured", result, used)):
            statuses = dict(res["statuses"])
            exhausted = int(res.get("exhausted", 0))
            opens = statuses.pop("200", 0)
            if statuses.pop("410", 0) > exhausted or statuses:  # wrk may stop before sending the last request
                run.problems.append(f"{name}: answers other than 200 (and 410 once packets ran out): {res['statuses']}")
            # wrk does not count the answers still in flight when it stops (at most one per
            # connection), but the server makes their receipts all the same
            receipts, wrong = money.opened(listed)
            sent = int(res.get("sent_opens", 0))
            if not opens <= receipts <= min(sent, opens + self.opts.connections):
                run.problems.append(
                    f"{name}: {receipts} receipts in the database for {opens} opens answered 200 "
                    f"of {sent} sent on {self.opts.connections} connections"
                )
            if wrong:
                run.problems.append(f"{name}: {wrong} finished packets whose shares do not add up to the total")
        run.extra["exhausted"] = bool(result.get("exhausted"))
        return run

    def for_workers(self, workers: int) -> list[Run]:
        """Every target with ``workers`` processes; the ceiling is measured before /healthz and again
        after grab, and the ratios use the mean of the two (the machine's load drifts)."""
        data_dir = self.workdir / f"data-w{workers}"
        ceiling = start_ceiling(self.workdir, workers)
        try:
            server = start_hongbao(data_dir, workers, self.opts.server_config)
        except BaseException:
            ceiling.stop()
            raise
        try:
            money = Money(server.url, data_dir)
            grab_id = money.packets(1)[0]
            if self.opts.grab_opened:
                with money._client(money.tokens[1]) as client:
                    _ok(client.post(f"/v1/packets/{grab_id}/open"))
            targets = self.opts.targets
            runs = [self.measure("ceiling", workers, ceiling.url + "/", "static.lua", server=ceiling)]
            if "healthz" in targets:
                runs.append(self.measure("healthz", workers, server.url + "/healthz", "static.lua", server=server))
            if "grab" in targets:
                runs.append(self.grab_run(workers, server, money, grab_id))
            if "redis_rt" in targets:
                runs.append(self.redis_rt_run(workers))
            runs.append(self.measure("ceiling", workers, ceiling.url + "/", "static.lua", server=ceiling))
            if "open" in targets:
                runs.append(self.open_run(workers, server, money))
        finally:
            status = server.stop()
            ceiling.stop()
        log = (data_dir / "server.log").read_text(errors="replace")
        if status != 0 or "Traceback" in log:
            runs[-1].problems.append(
                f"hongbao exited with {status} or logged a traceback; see {data_dir / 'server.log'}"
            )
        return runs


def summarize(runs: list[Run], opts: Options, load_before: list[float]) -> dict[str, Any]:
    """The JSON result: every run, the ratios to the same-worker ceiling, and the verdicts."""
    by_workers: dict[int, list[float]] = {}
    for r in runs:
        if r.target == "ceiling":
            by_workers.setdefault(r.workers, []).append(r.rps)
    ceilings = {workers: sum(rps) / len(rps) for workers, rps in by_workers.items()}
    ratios: dict[str, dict[str, float]] = {}
    failures: list[str] = []
    for run in runs:
        failures += [f"{run.target} x{run.workers}: {p}" for p in run.problems]
        if run.target != "ceiling" and ceilings.get(run.workers):
            ratios.setdefault(str(run.workers), {})[run.target] = round(run.rps / ceilings[run.workers], 4)
    floors = opts.floors
    floor_misses = [
        f"{target} x{workers}: {ratio:.1%} of the ceiling, floor {floors[target]:.0%}"
        for workers, by_target in ratios.items()
        for target, ratio in by_target.items()
        if target in floors and ratio < floors[target]
    ]
    for by_target in ratios.values():
        if by_target.get("redis_rt"):
            by_target["grab/redis_rt"] = round(by_target.get("grab", 0.0) / by_target["redis_rt"], 4)
    return {
        "settings": {
            "wrk": f"-t{opts.threads} -c{opts.connections} -d{opts.duration_s:g}s",
            "warmup_s": opts.warmup_s,
            "workers": list(opts.workers),
            "cpus": os.cpu_count(),
            "floors": floors,
            "loadavg_before": load_before,
            "loadavg_after": list(os.getloadavg()),
        },
        "runs": [r.as_json() for r in runs],
        "ceiling_rps": {str(w): round(rps, 1) for w, rps in ceilings.items()},
        "ratios": ratios,
        "incorrect": failures,
        "floor_misses": floor_misses,
        "passed": not failures and not floor_misses,
    }


def table(result: dict[str, Any]) -> str:
    """The printed table: one line per run."""
    lines = [
        f"{'target':8} {'workers':>7} {'req/s':>10} {'ratio':>7} {'p50 ms':>8} {'p99 ms':>8} {'non-2xx':>8} "
        f"{'cpu us/req':>10} {'cores':>6}  note"
    ]
    for run in result["runs"]:
        ratio = result["ratios"].get(str(run["workers"]), {}).get(run["target"])
        floor = result["settings"]["floors"].get(run["target"])
        note = {"open": "open/s (new receipts)", "redis_rt": "one redis-py round trip per request"}.get(
            run["target"], ""
        )
        if floor is not None and ratio is not None:
            note = f"floor {floor:.0%}: {'ok' if ratio >= floor else 'MISSED'}"
        if run["target"] == "grab" and "grab/redis_rt" in result["ratios"].get(str(run["workers"]), {}):
            note += f"; {result['ratios'][str(run['workers'])]['grab/redis_rt']:.2f}x redis_rt"
        ratio_text = f"{ratio:7.1%}" if ratio is not None else "      -"
        if run["target"] == "ceiling":
            note = f"mean of the ceiling runs: {result['ceiling_rps'][str(run['workers'])]:.0f} req/s"
        lines.append(
            f"{run['target']:8} {run['workers']:7d} {run['rps']:10.0f} {ratio_text} {run['p50_ms']:8.2f} "
            f"{run['p99_ms']:8.2f} {run['errors']['status']:8d} {run['server_cpu_us_per_request']:10.1f} "
            f"{run['server_cores_busy']:6.2f}  {note}"
        )
    load = result["settings"]
    lines.append(
        f"load average before {load['loadavg_before'][0]:.2f}, after {load['loadavg_after'][0]:.2f} "
        f"on {load['cpus']} cpus; 'cores' below the worker count means other processes took CPU from the server"
    )
    return "\n".join(lines)


def run(opts: Options) -> dict[str, Any]:
    """Run the whole benchmark and return the JSON result (also written to ``opts.out``)."""
    if shutil.which("wrk") is None:
        raise BenchError("wrk is not installed (apt-get install wrk)")
    workdir = Path(tempfile.mkdtemp(prefix="hongbao-bench-http-"))
    try:
        bench = Bench(opts, workdir)
        load_before = list(os.getloadavg())
        runs = [r for workers in opts.workers for r in bench.for_workers(workers)]
        result = summarize(runs, opts, load_before)
    finally:
        if not opts.keep_dir:
            shutil.rmtree(workdir, ignore_errors=True)
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(result, indent=2) + "\n")
    return result


def parse(argv: list[str] | None) -> Options:
    """The command line of ``bench/http/run.py`` as Options (durations in seconds)."""
    p = argparse.ArgumentParser(description="wrk against hongbao and the Python ceiling")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per measured run (default 10)")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds of warm-up before each run (default 2)")
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--workers", default="1,2", help="comma-separated worker counts (default 1,2)")
    p.add_argument("--out", type=Path, default=Path("bench-results/http.json"))
    p.add_argument("--no-gate", dest="gate", action="store_false", help="report the floors without failing")
    p.add_argument("--keep", dest="keep_dir", action="store_true", help="keep the temporary directory")
    p.add_argument(
        "--profile",
        dest="profile_dir",
        type=Path,
        help="record a py-spy profile of every hongbao worker during each measured run into this folder",
    )
    p.add_argument(
        "--profile-format",
        choices=["flamegraph", "raw", "speedscope"],
        default="flamegraph",
        help="py-spy output format (raw: collapsed stacks, one line each)",
    )
    p.add_argument(
        "--server-config", type=Path, help="TOML added to hongbao's configuration (e.g. the production backend)"
    )
    p.add_argument("--grab-opened", action="store_true", help="another member opens the grab packet first")
    p.add_argument("--redis-url", default="", help="the Redis of the redis_rt target")
    p.add_argument("--targets", default="ceiling,healthz,grab,open", help=f"comma-separated, of {','.join(TARGETS)}")
    p.add_argument("--floor", action="append", default=[], metavar="TARGET=RATIO", help="set a floor (e.g. grab=0.4)")
    a = p.parse_args(argv)
    workers = tuple(int(w) for w in a.workers.split(",") if w.strip())
    if not workers or min(workers) < 1 or a.duration < 1 or a.connections < 1 or a.threads < 1:
        p.error("--workers, --duration, --connections and --threads must be positive")
    if a.profile_dir is not None and _py_spy() is None:
        p.error("--profile needs py-spy (pip install py-spy)")
    targets = tuple(t for t in a.targets.split(",") if t.strip())
    if not set(targets) <= set(TARGETS) or ("redis_rt" in targets and not a.redis_url):
        p.error(f"--targets are of {','.join(TARGETS)}; redis_rt needs --redis-url")
    try:
        floors = {**FLOORS, **{t: float(r) for t, r in (f.split("=", 1) for f in a.floor)}}
    except ValueError:
        p.error("--floor takes TARGET=RATIO")
    return Options(
        a.duration,
        a.warmup,
        a.connections,
        a.threads,
        workers,
        a.out,
        a.gate,
        keep_dir=a.keep_dir,
        profile_dir=a.profile_dir,
        profile_format=a.profile_format,
        server_config=a.server_config.read_text() if a.server_config else "",
        grab_opened=a.grab_opened,
        redis_url=a.redis_url,
        targets=targets,
        floors=floors,
    )


def _py_spy() -> str | None:
    """py-spy beside this Python (the venv's, often not on PATH), else on PATH; None if neither."""
    return shutil.which("py-spy", path=os.path.dirname(sys.executable)) or shutil.which("py-spy")


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (0 pass, 1 floor missed or incorrect, 2 cannot run)."""
    opts = parse(argv)
    try:
        result = run(opts)
    except BenchError as exc:
        print(f"bench-http: {exc}", file=sys.stderr)
        return 2
    return report("bench-http", result, table(result), opts.out, opts.gate, "below floor (--no-gate)")


def report(name: str, result: dict[str, Any], table_text: str, out: Path, gate: bool, missed: str) -> int:
    """Print ``table_text``, then the incorrect runs and the floor misses of ``result`` (``missed``:
    how a miss reads with the gate off), each line prefixed by ``name``; the exit status."""
    print(table_text)
    for problem in result["incorrect"]:
        print(f"{name}: INCORRECT {problem}")
    for miss in result["floor_misses"]:
        print(f"{name}: {'FAIL' if gate else missed} {miss}")
    print(f"{name}: wrote {out}")
    return exit_status(result, gate)


def exit_status(result: dict[str, Any], gate: bool) -> int:
    """1 when a run was incorrect, or (with ``gate``) a ratio is under its floor; else 0."""
    return 1 if result["incorrect"] or (gate and result["floor_misses"]) else 0


if __name__ == "__main__":
    sys.exit(main())
