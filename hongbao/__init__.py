"""hongbao: a red-packet (lucky money) backend with real-time WebSocket push.

The packages are `hongbao.core` (money, split policy, order ids, services and their ports),
`hongbao.server` (process model, HTTP, WebSocket, CLI) and `hongbao.bench` (load generator, audit,
benchmarks). The hot paths live in the separate native module `hongbao_native`.
"""

__version__ = "0.1.0"
