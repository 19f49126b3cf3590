"""The baseline: what a team would typically build in Python instead of hongbao, serving the
same HTTP routes for the storm (send, pay, grab, open, groups, top-ups).

The common open-source design: FastAPI on uvicorn; a packet is pre-split at pay time into a Redis
list of amounts; open is one Lua script (already opened? return the amount; else LPOP a share
and remember it in a hash); the receipt and its credit are then written to MySQL by a
fire-and-forget task, so the answer does not wait for the database. Balances and the send debit
live in MySQL (one transaction per pay). The split is the usual double-average rule, uniform on
1..2m/n fen. Tokens: the same HS256 JWTs as hongbao (``sub``, ``role``), verified per request.
Errors: ``{"error": {"code", "message"}}`` with hongbao's codes, so the storm reads both alike.

Configuration from the environment (uvicorn's workers import ``create_app`` afresh):
``BASELINE_MYSQL_DSN`` (``mysql://user:pass@host:port``), ``BASELINE_REDIS_URL``, ``BASELINE_JWT_SECRET``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import secrets
import time
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import asyncmy
import jwt
import redis.asyncio as aioredis
from fastapi import FastAPI, Header, HTTPException, Request
from fastapi.responses import JSONResponse
from hongbao.core.sharding import parse_dsn

log = logging.getLogger("hongbao.baseline")
DATABASE = "hongbao_baseline"
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS b_account (user_id VARCHAR(64) PRIMARY KEY, balance_fen BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS b_ledger (kind VARCHAR(8), ref VARCHAR(200), user_id VARCHAR(64) NOT NULL, "
    "amount_fen BIGINT NOT NULL, PRIMARY KEY (kind, ref))",
    "CREATE TABLE IF NOT EXISTS b_packet (order_id CHAR(20) PRIMARY KEY, sender_id VARCHAR(64) NOT NULL, "
    "total_fen BIGINT NOT NULL, count INT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS b_receipt (order_id CHAR(20), user_id VARCHAR(64), amount_fen BIGINT NOT NULL, "
    "PRIMARY KEY (order_id, user_id))",
)
OPEN_LUA = """
local got = redis.call('HGET', KEYS[2], ARGV[1])
if got then return {1, got} end
local amount = redis.call('LPOP', KEYS[1])
if not amount then return {0, ''} end
redis.call('HSET', KEYS[2], ARGV[1], amount)
return {2, amount}
"""
PAY_TTL_S = 15 * 60
REDIS_CONNECTIONS = 64  # a blocking pool: past it, requests wait for a connection instead of failing
Auth = Annotated[str | None, Header()]


class Failure(HTTPException):
    """An error answered as ``{"error": {"code", "message"}}`` with ``status``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(status, {"code": code, "message": message})


def split(total_fen: int, count: int, rng: random.Random) -> list[int]:
    """The usual double-average split: each share uniform on 1..2m/n of what is left (the last gets the rest)."""
    shares, left = [], total_fen
    for n in range(count, 1, -1):
        share = rng.randint(1, max(1, min(2 * left // n, left - (n - 1))))
        shares.append(share)
        left -= share
    return [*shares, left]


async def mysql_pool(dsn: str, size: int = 20) -> Any:
    """An asyncmy pool on the baseline's database (created with its tables if missing)."""
    server = parse_dsn(dsn)[0]
    async with asyncmy.connect(**server) as conn, conn.cursor() as cur:
        await cur.execute(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
        await cur.execute(f"USE {DATABASE}")
        for statement in SCHEMA:
            await cur.execute(statement)
    return await asyncmy.create_pool(minsize=1, maxsize=size, db=DATABASE, autocommit=False, **server)


def create_app() -> FastAPI:
    """The baseline's FastAPI application, configured from the environment (see the module)."""
    secret = os.environ["BASELINE_JWT_SECRET"]
    warnings.filterwarnings("ignore", message=".*Duplicate entry")  # INSERT IGNORE of a repeat: the expected path
    state: dict[str, Any] = {"tasks": set(), "rng": random.SystemRandom()}

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        state["db"] = await mysql_pool(os.environ["BASELINE_MYSQL_DSN"])
        pool = aioredis.BlockingConnectionPool.from_url(
            os.environ["BASELINE_REDIS_URL"], max_connections=REDIS_CONNECTIONS, timeout=20, decode_responses=True
        )
        state["redis"] = aioredis.Redis(connection_pool=pool)
        state["open"] = state["redis"].register_script(OPEN_LUA)
        yield
        await asyncio.gather(*state["tasks"], return_exceptions=True)
        await state["redis"].aclose()
        await pool.disconnect()
        state["db"].close()
        await state["db"].wait_closed()

    app = FastAPI(lifespan=lifespan)

    @app.exception_handler(HTTPException)
    async def error(_request: Request, exc: HTTPException) -> JSONResponse:
        detail = (
            exc.detail if isinstance(exc.detail, dict) else {"code": str(exc.status_code), "message": str(exc.detail)}
        )
        return JSONResponse({"error": detail}, exc.status_code)

    def user(authorization: str | None, admin: bool = False) -> str:
        try:
            claims = jwt.decode(
                (authorization or "")[7:], secret, algorithms=["HS256"], options={"require": ["exp", "sub"]}
            )
        except jwt.PyJWTError:
            raise Failure(401, "unauthorized", "invalid token") from None
        if admin and claims.get("role") != "admin":
            raise Failure(403, "forbidden", "admin only")
        return str(claims["sub"])

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/admin/accounts/{user_id}/topup")
    async def topup(
        user_id: str,
        body: dict[str, Any],
        authorization: Auth = None,
        idempotency_key: Annotated[str | None, Header()] = None,
    ) -> dict[str, Any]:
        user(authorization, admin=True)
        amount = int(body["amount_fen"])
        async with state["db"].acquire() as conn, conn.cursor() as cur:
            added = await cur.execute(
                "INSERT IGNORE INTO b_ledger VALUES ('topup', %s, %s, %s)",
                (f"{user_id}:{idempotency_key or secrets.token_hex(8)}", user_id, amount),
            )
            if added:
                await cur.execute(
                    "INSERT INTO b_account VALUES (%s, %s) ON DUPLICATE KEY UPDATE balance_fen = balance_fen + %s",
                    (user_id, amount, amount),
                )
            await conn.commit()
        return {"user_id": user_id, "applied": bool(added)}

    @app.post("/v1/groups", status_code=201)
    async def create_group(body: dict[str, Any], authorization: Auth = None) -> dict[str, Any]:
        creator = user(authorization)
        group_id = "g" + secrets.token_hex(8)
        await state["redis"].sadd(f"bl:group:{group_id}", creator, *body.get("members", []))
        return {"group_id": group_id}

    @app.post("/v1/packets", status_code=201)
    async def send(body: dict[str, Any], authorization: Auth = None) -> dict[str, Any]:
        sender = user(authorization)
        count = 1 if body.get("kind") == "exclusive" else int(body["count"])
        total = int(body["per_share_fen"]) * count if "per_share_fen" in body else int(body["total_fen"])
        if not 1 <= count <= 100 or not count <= total <= 20_000:
            raise Failure(400, "invalid_amount", "count in 1..100, total in count..20000 fen")
        group = body.get("group_id")
        if group is not None and not await state["redis"].sismember(f"bl:group:{group}", sender):
            raise Failure(403, "not_member", "the sender is not in the group")
        order_id = f"{await state['redis'].incr('bl:seq'):020d}"
        await state["redis"].hset(
            f"bl:pre:{order_id}",
            mapping={
                "sender": sender,
                "kind": str(body.get("kind", "lucky")),
                "count": count,
                "total": total,
                "group": group or "",
                "receiver": body.get("receiver_id") or "",
            },
        )
        await state["redis"].expire(f"bl:pre:{order_id}", PAY_TTL_S)
        return {"order_id": order_id, "status": "pending_payment"}

    @app.post("/v1/packets/{order_id}/pay")
    async def pay(order_id: str, authorization: Auth = None) -> dict[str, Any]:
        sender = user(authorization)
        pre = await state["redis"].hgetall(f"bl:pre:{order_id}")
        if not pre or pre["sender"] != sender:
            raise Failure(404, "not_found", "no such pre-order")
        total, count = int(pre["total"]), int(pre["count"])
        async with state["db"].acquire() as conn, conn.cursor() as cur:
            if not await cur.execute(
                "INSERT IGNORE INTO b_ledger VALUES ('send', %s, %s, %s)", (order_id, sender, -total)
            ):
                return {"order_id": order_id, "status": "active"}  # paid before
            await cur.execute(
                "UPDATE b_account SET balance_fen = balance_fen - %s WHERE user_id = %s AND balance_fen >= %s",
                (total, sender, total),
            )
            if cur.rowcount != 1:
                await conn.rollback()
                raise Failure(400, "insufficient_balance", "balance too low")
            await cur.execute("INSERT INTO b_packet VALUES (%s, %s, %s, %s)", (order_id, sender, total, count))
            await conn.commit()
        shares = [total // count] * count if pre["kind"] == "equal" else split(total, count, state["rng"])
        await state["redis"].rpush(f"bl:amounts:{order_id}", *shares)
        await state["redis"].hset(f"bl:meta:{order_id}", mapping={"group": pre["group"], "receiver": pre["receiver"]})
        return {"order_id": order_id, "status": "active"}

    async def may_open(order_id: str, uid: str) -> None:
        meta = await state["redis"].hgetall(f"bl:meta:{order_id}")
        if not meta:
            raise Failure(404, "not_found", "no such packet")
        allowed = (
            uid == meta["receiver"]
            if meta["receiver"]
            else await state["redis"].sismember(f"bl:group:{meta['group']}", uid)
        )
        if not allowed:
            raise Failure(403, "not_member", "not for you")

    @app.post("/v1/packets/{order_id}/grab")
    async def grab(order_id: str, authorization: Auth = None) -> dict[str, Any]:
        uid = user(authorization)
        await may_open(order_id, uid)
        got = await state["redis"].hget(f"bl:opened:{order_id}", uid)
        if got is not None:
            return {"status": "opened", "amount_fen": int(got)}
        if not await state["redis"].llen(f"bl:amounts:{order_id}"):
            raise Failure(410, "finished", "no share left")
        return {"status": "ok"}

    @app.post("/v1/packets/{order_id}/open")
    async def open_(order_id: str, authorization: Auth = None) -> dict[str, Any]:
        uid = user(authorization)
        await may_open(order_id, uid)
        kind, amount = await state["open"](keys=[f"bl:amounts:{order_id}", f"bl:opened:{order_id}"], args=[uid])
        if int(kind) == 0:
            raise Failure(410, "finished", "no share left")
        if int(kind) == 2:  # a new receipt: written to MySQL in the background (the design's trade)
            task = asyncio.create_task(write_receipt(order_id, uid, int(amount)))
            state["tasks"].add(task)
            task.add_done_callback(state["tasks"].discard)
        return {"order_id": order_id, "amount_fen": int(amount), "repeat": int(kind) == 1}

    async def write_receipt(order_id: str, uid: str, amount: int) -> None:
        try:
            async with state["db"].acquire() as conn, conn.cursor() as cur:
                await cur.execute("INSERT INTO b_receipt VALUES (%s, %s, %s)", (order_id, uid, amount))
                await cur.execute(
                    "INSERT INTO b_ledger VALUES ('credit', %s, %s, %s)", (f"{order_id}:{uid}", uid, amount)
                )
                await cur.execute(
                    "INSERT INTO b_account VALUES (%s, %s) ON DUPLICATE KEY UPDATE balance_fen = balance_fen + %s",
                    (uid, amount, amount),
                )
                await conn.commit()
        except Exception as exc:  # lost: nothing retries it (what the audit is there to show)
            log.warning("receipt %s:%s of %d fen not written: %s (%.3f)", order_id, uid, amount, exc, time.time())

    return app
