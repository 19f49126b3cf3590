"""The one error hierarchy of hongbao, mapped once to HTTP statuses and error codes.

Every error carries the ``code`` of the JSON error body ``{"error": {"code", "message"}}`` and the
HTTP ``status`` it maps to (docs/architecture.md section 12). Stdlib bases are added where the meaning matches,
so callers may also catch ``ValueError`` or ``PermissionError``.
"""

from __future__ import annotations


class HongbaoError(Exception):
    """Base of every hongbao error: ``code`` (str) and ``status`` (int) of the HTTP answer."""

    code = "invalid_request"
    status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def headers(self) -> list[tuple[str, str]]:
        """Extra response headers the error's answer carries (lower-case names); none by default."""
        return []


class InvalidRequest(HongbaoError, ValueError):
    """Malformed or inconsistent input (400 invalid_request)."""


class InvalidAmount(HongbaoError, ValueError):
    """An amount that is not a positive integer of fen within limits (400 invalid_amount)."""

    code = "invalid_amount"


class InvalidCount(HongbaoError, ValueError):
    """A share count outside 1..max_count, or above the total in fen (400 invalid_count)."""

    code = "invalid_count"


class BadOrderId(HongbaoError, ValueError):
    """An order id that fails the codec or its Damm check digit (400 bad_order_id)."""

    code = "bad_order_id"


class Unauthorized(HongbaoError, PermissionError):
    """Missing, expired or wrongly signed token (401 unauthorized)."""

    code = "unauthorized"
    status = 401


class Forbidden(HongbaoError, PermissionError):
    """Authenticated but not allowed, e.g. a non-admin on an admin route (403 forbidden)."""

    code = "forbidden"
    status = 403


class NotMember(HongbaoError, PermissionError):
    """The caller is not a member of the packet's group, or not its receiver (403 not_member)."""

    code = "not_member"
    status = 403


class NotFound(HongbaoError, LookupError):
    """Unknown packet, group or route (404 not_found)."""

    code = "not_found"
    status = 404


class InsufficientBalance(HongbaoError):
    """The sender's balance in fen is below the packet's total (409 insufficient_balance)."""

    code = "insufficient_balance"
    status = 409


class NotPaid(HongbaoError):
    """The packet is still a pre-order awaiting payment (409 not_paid)."""

    code = "not_paid"
    status = 409


class Finished(HongbaoError):
    """Every share is opened (410 finished)."""

    code = "finished"
    status = 410


class Expired(HongbaoError):
    """The packet is past its expiry (410 expired). A pre-order past its pay-by time is gone: NotFound."""

    code = "expired"
    status = 410


class IdempotencyKeyReused(HongbaoError):
    """An Idempotency-Key used again with a different request, e.g. a top-up of another amount in fen
    (422 idempotency_key_reused; draft-ietf-httpapi-idempotency-key-header section 2.7): nothing moved."""

    code = "idempotency_key_reused"
    status = 422


class PayloadTooLarge(HongbaoError):
    """The request body is over the configured limit in bytes (413 payload_too_large)."""

    code = "payload_too_large"
    status = 413


class Busy(HongbaoError):
    """Admission refused under load; retry after ``retry_after`` seconds (429 busy). ``counter``:
    the metrics event it counts as (the level of flow control that refused: ``admission_rejections``
    for an open, ``send_rejections``, ``grab_rejections``)."""

    code = "busy"
    status = 429

    def __init__(self, message: str, retry_after: float = 1.0, counter: str = "admission_rejections") -> None:
        super().__init__(message)
        self.retry_after, self.counter = retry_after, counter

    @property
    def headers(self) -> list[tuple[str, str]]:
        """Retry-After in whole seconds, at least 1 (RFC 9110 section 10.2.3)."""
        return [("retry-after", str(max(1, round(self.retry_after))))]


class Overloaded(Busy):
    """This worker is overloaded (its event loop runs behind, hongbao.core.loop_lag): 429 busy,
    retry after 1 s, counted as ``overload_rejections``."""

    def __init__(self) -> None:
        super().__init__("this worker is overloaded, retry shortly", 1.0, "overload_rejections")


class Degraded(HongbaoError):
    """A dependency is down and the operation has no degraded path, or the operation is shed
    under pressure (503 degraded, with ``Retry-After: <retry_after>`` in whole seconds; 1 by
    default: a breaker or a pool tries the dependency again within a second)."""

    code = "degraded"
    status = 503

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    @property
    def headers(self) -> list[tuple[str, str]]:
        """Retry-After in whole seconds, at least 1 (RFC 9110 section 10.2.3)."""
        return [("retry-after", str(max(1, self.retry_after)))]


class MethodNotAllowed(HongbaoError):
    """The path exists but not with this method (405 method_not_allowed); ``allowed`` lists the
    methods it takes, sent as the Allow header (RFC 9110 section 15.5.6)."""

    code = "method_not_allowed"
    status = 405

    def __init__(self, message: str, allowed: list[str]) -> None:
        super().__init__(message)
        self.allowed = allowed

    @property
    def headers(self) -> list[tuple[str, str]]:
        """The Allow header."""
        return [("allow", ", ".join(self.allowed))]


class Conflict(HongbaoError):
    """The request conflicts with the resource's state, e.g. cancelling a paid packet (409 conflict)."""

    code = "conflict"
    status = 409


class TooManyConnections(Busy):
    """New WebSocket connections over the host-wide admission rate (503 busy with Retry-After in
    seconds; docs/architecture.md section 7): refused before any session-store work."""

    status = 503


class UpgradeRequired(HongbaoError):
    """A request to the WebSocket route that is not an upgrade, or asks for a WebSocket version
    other than 13 (426 upgrade_required). The answer names the protocol and the version to use:
    RFC 9110 section 15.5.22 (426 carries Upgrade, and Upgrade its connection option, section 7.8)
    and RFC 6455 section 4.4 (Sec-WebSocket-Version)."""

    code = "upgrade_required"
    status = 426

    @property
    def headers(self) -> list[tuple[str, str]]:
        """Upgrade, Connection and Sec-WebSocket-Version."""
        return [("upgrade", "websocket"), ("connection", "upgrade"), ("sec-websocket-version", "13")]
